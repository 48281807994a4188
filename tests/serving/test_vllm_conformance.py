"""serving_benchmark_table against vLLM's own arithmetic (tests/serving/vllm_metrics.py,
written from vllm/benchmarks/serve.py at vLLM commit
009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1): on result files as ``vllm bench serve``
writes them, and on generated ones (hypothesis) with failed requests of both kinds,
one-token outputs, requests whose tokens came in one chunk, ties and goodput SLOs."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtrace import connect
from kvtrace.errors import InputError
from kvtrace.ingest import ingest
from tests.serving.vllm_metrics import (
    METRICS,
    Outcome,
    calculate_metrics,
    disagreements,
    failed,
    result_file,
    streamed,
)

SLOS = {"ttft": "ttft_slo_ms", "tpot": "tpot_slo_ms", "e2el": "e2e_slo_ms"}
# vLLM writes an empty error for an HTTP failure without a reason, a traceback for an exception
ERRORS = ("", "Internal Server Error", "Traceback (most recent call last):\nTimeoutError\n")


def _table(warehouse, path: Path, goodput_ms: dict[str, float]) -> dict:
    """The serving_benchmark_table row of the run ingested from ``path``."""
    (run_id,) = [f.run_id for f in ingest(warehouse, [str(path)]).files]
    slos = ", ".join(f"{SLOS[name]} := {ms!r}" for name, ms in goodput_ms.items())
    with connect(warehouse) as con:
        table = con.sql(f"FROM serving_benchmark_table({slos}) WHERE run_id = '{run_id}'")
        (row,) = table.to_arrow_table().to_pylist()
    return row


def _check(warehouse, path: Path, outcomes: list[Outcome], duration: float, goodput_ms: dict):
    reported = calculate_metrics(outcomes, duration, goodput_ms)
    row = _table(warehouse, path, goodput_ms)
    wrong = disagreements(row, reported)
    assert not wrong, (
        f"{'; '.join(wrong)} -- for requests {outcomes!r}, duration {duration!r}, "
        f"goodput SLOs {goodput_ms!r}"
    )
    if not goodput_ms:
        assert row["request_goodput"] is None
    return row


def _written(path: Path, document: dict) -> Path:
    path.write_text(json.dumps(document))
    return path


def _mixed_run() -> tuple[list[Outcome], float]:
    """Ten requests of every kind vLLM's file can hold, started 0.25 s apart."""
    start = 5000.0
    outcomes = [
        streamed(120, start, [start + 0.1, start + 0.12, start + 0.14, start + 0.16], 4, 4),
        streamed(80, start + 0.25, [start + 0.35, start + 0.37], None, 2),  # no usage
        failed(300, start + 0.5, "Internal Server Error"),
        failed(40, start + 0.75, ""),  # an HTTP error without a reason
        streamed(60, start + 1.0, [start + 1.1], 1, 1),  # one token
        streamed(70, start + 1.25, [start + 1.35], 5, 5),  # five tokens in one chunk
        # the chat client before it left the trailing usage chunk out of the latency
        streamed(90, start + 1.5, [start + 1.6, start + 1.62, start + 1.64], 3, 3, end=start + 1.7),
        streamed(50, start + 1.75, [start + 1.85, start + 1.87], 2, 2, queue_time=0.2),  # ties
        streamed(55, start + 2.0, [start + 2.1, start + 2.12], 2, 2),
        streamed(200, start + 2.25, [start + 2.4, start + 2.41, start + 2.5, start + 2.8], 9, 9),
    ]
    return outcomes, 3.0


def test_a_result_file_as_vllm_writes_it_shows_what_vllm_printed(warehouse, tmp_path):
    outcomes, duration = _mixed_run()
    goodput = {"ttft": 100.0, "tpot": 20.0, "e2el": 200.0}
    document = result_file(outcomes, duration, goodput, request_rate=4.0, max_concurrency=8)
    row = _check(warehouse, _written(tmp_path / "full.json", document), outcomes, duration, goodput)
    assert (row["source"], row["request_rate"], row["max_concurrency"]) == (
        "summary+requests",
        4,
        8,
    )
    for column in (f"{stat}_{m}_ms" for m in METRICS for stat in ("mean", "median", "p99")):
        assert row[column] == document[column], column  # the printed number, as printed
    computed = result_file(outcomes, duration, goodput, printed=False)
    row = _check(
        warehouse, _written(tmp_path / "lists.json", computed), outcomes, duration, goodput
    )
    assert row["source"] == "requests"
    assert row["failed"] == 2 and row["total_output_tokens"] == 28


def test_each_request_of_a_result_file(warehouse, tmp_path):
    outcomes, duration = _mixed_run()
    ingest(warehouse, [str(_written(tmp_path / "r.json", result_file(outcomes, duration, {})))])
    with connect(warehouse) as con:
        rows = con.sql(
            "SELECT arrival_s, ttft_s, tpot_s, e2e_s, error FROM request_timings "
            "ORDER BY request_idx"
        ).fetchall()
    assert [arrival for arrival, *_ in rows] == pytest.approx([0.25 * i for i in range(10)])
    assert [error for *_, error in rows][2:4] == [
        "Internal Server Error",
        "failed without an error message",
    ]
    assert rows[4][2] is None  # one token: no TPOT
    assert rows[5][2] == 0.0  # five tokens in one chunk: no decode time after the first
    assert rows[6][3] == pytest.approx(0.2) and rows[6][2] == pytest.approx(0.05)  # its latency


def test_older_names_and_older_files(warehouse, tmp_path):
    outcomes, duration = _mixed_run()
    document = result_file(outcomes, duration, {}, printed=False)
    fork = {("e2els" if key == "latencies" else key): value for key, value in document.items()}
    _check(warehouse, _written(tmp_path / "fork.json", fork), outcomes, duration, {})
    # a file of a vLLM that saved no latencies: each request's ends at its last chunk
    older = {key: value for key, value in document.items() if key != "latencies"}
    to_last_chunk = [replace(o, latency=o.ttft + sum(o.itl)) if o.success else o for o in outcomes]
    _check(warehouse, _written(tmp_path / "older.json", older), to_last_chunk, duration, {})


def test_a_file_saved_without_details_is_its_printed_summary(warehouse, tmp_path):
    outcomes, duration = _mixed_run()
    document = result_file(outcomes, duration, {"ttft": 100.0})
    details = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts")
    summary = {k: v for k, v in document.items() if k not in (*details, "errors")}
    report = ingest(warehouse, [str(_written(tmp_path / "summary.json", summary))])
    assert [(f.fmt, f.rows) for f in report.files] == [("vllm", 1)]
    with connect(warehouse) as con:
        row = con.sql("FROM serving_benchmark").to_arrow_table().to_pylist()[0]
    assert (row["source"], row["completed"], row["failed"]) == ("summary", 8, 2)
    assert row["p99_e2el_ms"] == document["p99_e2el_ms"]
    assert math.isinf(row["request_rate"])


def test_bad_values_are_one_sentence(warehouse, tmp_path):
    outcomes, duration = _mixed_run()
    document = result_file(outcomes, duration, {}, printed=False)
    document["successes"] = [True] * 9 + ["yes"]
    report = ingest(warehouse, [str(_written(tmp_path / "masked.json", document))])
    assert (report.rows, report.rejected) == (9, 1)
    with connect(warehouse) as con:
        ((reason,),) = con.sql("SELECT reason FROM quarantine").fetchall()
    assert reason == "bad value: successes must hold true or false, got 'yes'"
    document = result_file(outcomes, duration, {})
    document["mean_ttft_ms"] = "fast"
    with pytest.raises(InputError, match="printed summary is not numbers: mean_ttft_ms must"):
        ingest(warehouse, [str(_written(tmp_path / "bad.json", document))])


def test_an_slo_at_a_request_value_is_judged_in_seconds_as_vllm_judges_it(warehouse, tmp_path):
    ttft = 0.0930093  # (ttft * 1000) / 1000 < ttft: vLLM finds it over an SLO of ttft * 1000
    outcomes = [Outcome(10, True, ttft=ttft, itl=[0.02], latency=ttft + 0.02, usage_tokens=2)]
    goodput = {"ttft": ttft * 1000}
    assert calculate_metrics(outcomes, 1.0, goodput).values["request_goodput"] == 0
    document = result_file(outcomes, 1.0, goodput, printed=False)
    _check(warehouse, _written(tmp_path / "tie.json", document), outcomes, 1.0, goodput)


GAPS = st.sampled_from([0.005, 0.01, 0.02, 0.05]) | st.floats(0.0, 0.2, allow_subnormal=False)
FIRST = st.sampled_from([0.05, 0.1, 0.25]) | st.floats(0.001, 2.0, allow_subnormal=False)


@st.composite
def benchmarks(draw) -> tuple[list[Outcome], float, dict[str, float]]:
    """A benchmark's requests as vLLM's client recorded them, its duration and SLOs."""
    clock = 1000.0 + draw(st.floats(0.0, 100.0))
    outcomes = []
    for _ in range(draw(st.integers(1, 10))):
        clock += draw(st.sampled_from([0.0, 0.1, 0.25]))
        prompt, queue = draw(st.integers(1, 4000)), draw(st.sampled_from([0.0, 0.01]))
        if draw(st.integers(0, 3)) == 0:
            outcomes.append(failed(prompt, clock, draw(st.sampled_from(ERRORS)), queue))
            continue
        times = list(itertools.accumulate([clock + draw(FIRST), *draw(st.lists(GAPS, max_size=6))]))
        tail = draw(st.sampled_from([0.0, 0.0, 0.003]))
        usage, text = draw(st.none() | st.integers(0, 8)), draw(st.integers(0, 8))
        outcomes.append(streamed(prompt, clock, times, usage, text, queue, end=times[-1] + tail))
    ends = [o.start_time + o.latency for o in outcomes]
    duration = max(ends) - outcomes[0].start_time + draw(st.floats(0.001, 1.0))
    # SLOs right at a request's value (a tie) or at round numbers
    at_values = {
        "ttft": [o.ttft * 1000 for o in outcomes if o.success],
        "e2el": [o.latency * 1000 for o in outcomes if o.success],
        "tpot": [
            (o.latency - o.ttft) / (n - 1) * 1000
            for o in outcomes
            if o.success and (n := o.usage_tokens or o.text_tokens) > 1
        ],
    }
    goodput = {}
    for name in draw(st.sets(st.sampled_from(sorted(SLOS)))):
        goodput[name] = draw(st.sampled_from([0.0, 20.0, 150.0, *at_values[name]]))
    return outcomes, duration, goodput


_examples = itertools.count()


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(benchmark=benchmarks())
def test_generated_benchmarks_agree_with_vllm(warehouse, tmp_path, benchmark):
    outcomes, duration, goodput = benchmark
    document = result_file(outcomes, duration, goodput, printed=False)
    path = _written(tmp_path / f"generated-{next(_examples)}.json", document)
    _check(warehouse, path, outcomes, duration, goodput)

"""Reports open in headless Chromium with every chart drawn, offline, strings escaped."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kvtrace.collectors._dsa_collect import collect_dsa
from kvtrace.collectors.datasets.ruler import niah_requests
from kvtrace.collectors.datasets.sharegpt import load_conversations, sharegpt_requests
from kvtrace.collectors.dsa_ref import ByteTokenizer, DsaRef, DsaRefConfig
from kvtrace.ingest import ingest
from kvtrace.synthetic.timeline import TimelineShape, write_timeline_trace
from kvtrace.warehouse import Warehouse
from tests.conftest import DATA, query_rows, warehouse_at
from tests.reports.browser import open_report
from tests.serving.fixtures import pool_rows, request_rows, write
from tests.test_cli import kvtrace
from tests.workload.test_results import VIDUR_HEADER, VLLM

HOSTILE = "<script>alert(1)</script>"
VIDUR = VIDUR_HEADER + "0,100,3,0.2,0.01,0.12,0.03,0,0.0\n1,200,2,0.3,0.02,0.25,0.025,1,0.5\n"
SHAREGPT = Path(__file__).parent.parent / "data" / "sharegpt_format_dummy_conversation.json"
ARTIFACTS = Path(
    os.environ.get("KVTRACE_TEST_ARTIFACTS", Path(__file__).parent.parent.parent / "test-artifacts")
)
CONFIG = DsaRefConfig(
    dim=32,
    n_layers=3,
    n_heads=2,
    index_heads=2,
    index_dim=8,
    rope_dim=4,
    q_lora_rank=16,
    index_topk=64,
    max_seq_len=4096,
)
SGLANG_SWEEP = DATA / "workload" / "sglang_bench_serving_example.jsonl"
COMMANDS = {
    "dsa": ["report", "dsa"],
    "pool": ["report", "pool"],
    "serving": ["report", "serving", "--slo", "ttft=300", "--slo", "tpot=40"],
    "compare": ["report", "compare", "--experiment", "exp-a", "--experiment", "exp-b"],
    "compare-dsa": ["report", "compare", "--run", "chat", "--run", "niah"],
    "whatif": ["report", "whatif"],
    "eval": ["report", "eval", "--run", "niah", "--run", "niah-b"],
    "workload": ["report", "workload"],
    "timeline": ["report", "timeline"],
}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    """A warehouse with two DSA runs (one with a hostile dataset name and prefix hits)
    and two serving experiments."""
    folder = tmp_path_factory.mktemp("reports")
    root = warehouse_at(folder / "wh")
    warehouse = Warehouse(root, create=True)
    tokenizer = ByteTokenizer()
    conversations, _ = load_conversations(SHAREGPT)
    chat = list(sharegpt_requests(conversations, "per_user_turn"))[:4]
    collect_dsa(
        warehouse,
        chat,
        model=DsaRef(CONFIG),
        tokenizer=tokenizer,
        run_name="chat",
        dataset=HOSTILE,
        block_sizes=(16, 64),
        max_new_tokens=6,
    )
    niah = list(niah_requests(2, 600, lambda t: len(tokenizer.encode(t)), seed=1))
    collect_dsa(
        warehouse,
        niah,
        model=DsaRef(CONFIG),
        tokenizer=tokenizer,
        run_name="niah",
        dataset="ruler",
        block_sizes=(64,),
        max_new_tokens=6,
    )
    collect_dsa(
        warehouse,
        niah,
        model=DsaRef(CONFIG, seed=1),
        tokenizer=tokenizer,
        run_name="niah-b",
        dataset="ruler",
        block_sizes=(64,),
        max_new_tokens=6,
    )
    workload = folder / "workload"
    workload.mkdir()
    mooncake = Path(__file__).parent.parent / "data" / "mooncake_conversation_trace.jsonl"
    (workload / "mooncake.jsonl").write_text(
        "\n".join(mooncake.read_text().splitlines()[:400]) + "\n"
    )
    (workload / "bench.json").write_text(json.dumps(VLLM))
    (workload / "request_metrics.csv").write_text(VIDUR)
    ingest(
        warehouse,
        [
            str(workload / "mooncake.jsonl"),
            str(workload / "bench.json"),
            str(workload / "request_metrics.csv"),
            str(SGLANG_SWEEP),
        ],
    )
    ingest(
        warehouse,
        [str(Path(__file__).parent.parent / "data" / "kineto_sampled_rank0.json.gz")],
        run_name="hta-sample",
    )
    profile = folder / "profile" / "rank0.pt.trace.json"
    profile.parent.mkdir()
    write_timeline_trace(profile, TimelineShape(comm_us=40, comm_hidden_us=30))
    ingest(warehouse, [str(profile)], run_name="offload-decode")
    folder = folder / "serving"
    for experiment, shift in (("exp-a", 0.0), ("exp-b", 0.25)):
        write(folder / f"{experiment}_pool_timeseries.jsonl", pool_rows())
        write(
            folder / f"{experiment}_metrics.jsonl",
            [{**row, "latency_s": row["latency_s"] + shift} for row in request_rows()],
        )
        ingest(
            warehouse,
            [
                str(folder / f"{experiment}_pool_timeseries.jsonl"),
                str(folder / f"{experiment}_metrics.jsonl"),
            ],
        )
    return root


def _render(root: Path, name: str, output: Path) -> str:
    result = kvtrace("-w", str(root), *COMMANDS[name], "--output", str(output))
    assert result.returncode == 0, result.stderr
    return output.read_text()


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_chart_renders_offline_and_nothing_overflows_its_card(root, tmp_path, name):
    html = _render(root, name, tmp_path / f"{name}.html")
    expected_charts = html.count("data-spec=")
    opened = open_report(tmp_path / f"{name}.html", ARTIFACTS / f"report-{name}.png")
    assert opened.console_errors == []
    assert opened.requests == []
    assert len(opened.figures) == expected_charts > 0
    for figure in opened.figures:
        assert figure["rendered"] and not figure["error"], figure
        assert figure["marks"] > 0, figure
    assert opened.scripts == 3 + expected_charts + 1  # libraries, specs, embedding
    assert not opened.alerts
    assert opened.overflows == []


def test_the_whatif_report_holds_the_tier_table_of_kvtrace_whatif(root, tmp_path):
    html = _render(root, "whatif", tmp_path / "whatif.html")
    result = kvtrace(
        "-w", str(root), "whatif", "--run", "niah", "--block-size", "64", "--format", "csv"
    )
    assert result.returncode == 0, result.stderr
    remote = next(
        row for row in csv.DictReader(io.StringIO(result.stdout)) if row["tier"] == "remote"
    )
    assert f"<td>{int(remote['accesses_served']):,}</td>" in html
    assert html.count("<section ") == 6 and "FROM dsa_hit_curve(" in html


def test_the_whatif_report_sets_the_shared_pool_beside_the_private_ones(root, tmp_path):
    html = _render(root, "whatif", tmp_path / "whatif.html")
    shared = kvtrace(
        "-w",
        str(root),
        "whatif",
        "--run",
        "chat",
        "--block-size",
        "16",
        "--sharing",
        "content",
        "--table",
        "runs",
        "--format",
        "csv",
    )
    assert shared.returncode == 0, shared.stderr
    (row,) = csv.DictReader(io.StringIO(shared.stdout))
    # the chat run's requests are turns of one conversation: later turns find earlier
    # turns' prompt blocks in the shared pool, which saves prefill time
    assert int(row["reused_prompt_tokens"]) > 0 and float(row["ttft_saved_ms_max"]) > 0
    pools = html[html.index("Private and shared pools side by side</h2>") :]
    pools = pools[: pools.index("</section>")]
    assert "per-request caches" in pools and "one pool, shared by content" in pools
    assert f"<td>{int(row['reused_prompt_tokens']):,}</td>" in pools
    assert f"<td>{int(row['shared_hits']):,}</td>" in pools


def test_the_eval_report_diffs_the_two_runs_it_was_given(root, tmp_path):
    html = _render(root, "eval", tmp_path / "eval.html")
    result = kvtrace(
        "-w",
        str(root),
        "sql",
        "SELECT samples, fixed, broken FROM eval_diff_summary('niah', 'niah-b')",
        "--format",
        "csv",
    )
    samples, fixed, broken = result.stdout.splitlines()[1].split(",")
    assert int(samples) == 2
    assert f"<td>{samples}</td><td>{fixed}</td><td>{broken}</td>" in html
    assert html.count("<section ") == 5 and "FROM eval_needle_recall_by_layer(" in html


def test_the_workload_report_holds_the_fidelity_of_the_simulation(root, tmp_path):
    html = _render(root, "workload", tmp_path / "workload.html")
    assert "fidelity: request_metrics-" in html and "(simulated) against bench-" in html
    assert html.count("<section ") == 7 and "FROM timing_fidelity(" in html
    assert "Select a measured and a simulated run" not in html


def test_the_workload_report_sets_engine_prefix_caches_beside_the_block_cache(root, tmp_path):
    html = _render(root, "workload", tmp_path / "workload.html")
    for cache in ("block cache, lru", "block cache, opt", "LRU pool, prefix tokens"):
        assert f'"cache": "{cache}"' in html or f'"cache":"{cache}"' in html, cache
    assert "radix tree, prefix tokens" in html


def test_the_serving_report_draws_each_sweep_against_its_slos(root, tmp_path):
    html = _render(root, "serving", tmp_path / "serving.html")
    # the user's settings under one header entry, by the names the queries read
    assert "<dt>Settings</dt><dd>slo_tpot_ms = 40; slo_ttft_ms = 300</dd>" in html
    assert "--slo ttft=300 --slo tpot=40" in html  # the command that makes it again
    points = re.findall(r'"series": ?"sglang_bench_serving_example"', html)
    # against throughput: load levels x metrics x (median, p99); against the rate asked
    # for: the two levels of a finite rate x (TTFT, TPOT) x (median, p99)
    assert len(points) == 3 * 3 * 2 + 2 * 2 * 2
    assert re.search(r'"slo_ms": ?300\.0', html) and re.search(r'"slo_ms": ?40\.0', html)
    assert "summary+requests" in html  # the table says where its numbers come from


def test_slos_are_checked_and_belong_to_the_serving_report(root, tmp_path):
    output = str(tmp_path / "r.html")
    wrong = kvtrace("-w", str(root), "report", "serving", "--slo", "ttft", "--output", output)
    assert wrong.returncode != 0 and "expected --slo METRIC=MS" in wrong.stderr
    elsewhere = kvtrace("-w", str(root), "report", "pool", "--slo", "ttft=1", "--output", output)
    assert elsewhere.returncode != 0
    assert "--slo applies to the serving report only" in elsewhere.stderr


def test_the_timeline_report_draws_a_typical_iteration_and_the_copy_bandwidth(root, tmp_path):
    html = _render(root, "timeline", tmp_path / "timeline.html")
    assert html.count("<section ") == 11 and html.count("data-spec=") == 5
    assert "No ProfilerStep with CPU and GPU events" not in html  # the critical path is drawn
    assert "No GPU events inside a ProfilerStep" not in html
    assert "No copies of at least 1 MB" not in html
    breakdown = html[html.index("Idle, compute and other GPU time (HTA&#x27;s breakdown)</h2>") :]
    breakdown = breakdown[: breakdown.index("</section>")]
    assert ">kvtrace</td>" in breakdown and ">hta</td>" in breakdown
    assert "p99_us" in html  # each top kernel's duration distribution


def test_a_hostile_dataset_name_shows_as_text(root, tmp_path):
    html = _render(root, "dsa", tmp_path / "dsa.html")
    assert HOSTILE not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    opened = open_report(tmp_path / "dsa.html", ARTIFACTS / "report-dsa-hostile.png")
    assert HOSTILE in opened.texts
    assert opened.scripts == 3 + html.count("data-spec=") + 1
    assert not opened.alerts


def test_the_same_warehouse_and_command_give_the_same_html(root, tmp_path):
    generated = re.compile(r'<p class="generated">Generated at [^<]*</p>')
    first = _render(root, "dsa", tmp_path / "dsa.html")
    second = _render(root, "dsa", tmp_path / "dsa.html")
    assert len(generated.findall(first)) == 1
    assert generated.sub("", first) == generated.sub("", second)


def test_reports_show_their_provenance_and_sql(root, tmp_path):
    html = _render(root, "pool", tmp_path / "pool.html")
    warehouse = Warehouse(root)
    assert f"<dd>{warehouse.version}</dd>" in html
    assert (
        f"kvtrace -w {warehouse.location} report pool --as-of {warehouse.version} "
        "--output pool.html" in html
    )
    assert html.count("<details><summary>SQL</summary>") == html.count("<section ")
    assert "FROM pool_stuck_intervals(warmup_fraction := getvariable(" in html
    assert "cdn" not in html.lower().replace("cdna", "")


def test_a_single_run_side_is_flagged_in_the_comparison(root, tmp_path):
    html = _render(root, "compare-dsa", tmp_path / "cmp.html")
    assert html.count('class="warning"') == 2  # the DSA table and its chart
    assert "A side rests on a single run" in html


def test_selections_that_match_nothing_are_one_clear_error(root, tmp_path):
    result = kvtrace(
        "-w", str(root), "report", "dsa", "--run", "nope", "-o", str(tmp_path / "x.html")
    )
    assert result.returncode == 1
    assert result.stderr == "Error: no DSA runs in the warehouse match --run nope\n"
    assert not (tmp_path / "x.html").exists()
    odd = kvtrace(
        "-w", str(root), "report", "compare", "--run", "chat", "-o", str(tmp_path / "y.html")
    )
    assert odd.returncode == 1 and odd.stderr.startswith("Error: compare needs two sides")


def test_the_demo_ends_by_writing_its_dsa_report(tmp_path):
    result = kvtrace("-w", warehouse_at(tmp_path / "wh"), "demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = tmp_path / "kvtrace-demo-report.html"  # beside a local warehouse, or in cwd
    assert f"Report:    {report}" in result.stdout
    html = report.read_text()
    assert html.count("data-spec=") == 7 and "report dsa --run demo-ruler-dsa-ref-" in html
    opened = open_report(report, ARTIFACTS / "report-demo.png")  # what a newcomer opens first
    assert opened.console_errors == [] and opened.overflows == []
    assert all(f["rendered"] and f["marks"] > 0 for f in opened.figures)


class _Tables(HTMLParser):
    """Every table of a page: its header and its rows of (text, hover title) cells."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[tuple[list[str], list[list[tuple[str, str]]]]] = []
        self._cell: list[str] | None = None
        self._title = ""

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append(([], []))
        elif tag == "tr" and self.tables:
            self.tables[-1][1].append([])
        elif tag in ("td", "th"):
            self._cell, self._title = [], ""
        elif tag == "span" and self._cell is not None:
            self._title = dict(attrs).get("title", "")

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            header, rows = self.tables[-1]
            text = "".join(self._cell)
            (header.append(text) if tag == "th" else rows[-1].append((text, self._title)))
            self._cell = None


def _tables(html: str):
    parser = _Tables()
    parser.feed(html)
    return [(header, [row for row in rows if row]) for header, rows in parser.tables]


@pytest.mark.parametrize("name", ["dsa", "timeline", "pool", "whatif", "workload"])
def test_table_numbers_follow_the_reports_rule_and_run_ids_show_whole_on_hover(
    root, tmp_path, name
):
    """A column of whole numbers is written whole; in any other column each number has
    three significant digits (kvtrace/reports/_format.py), so a row of statistics reads
    with one precision."""
    html = _render(root, name, tmp_path / f"{name}.html")
    run_ids = {row[0] for row in query_rows(root, "SELECT run_id FROM runs")}
    number = re.compile(r"^-?[\d,]+(\.\d+)?$")
    for header, rows in _tables(html):
        for column, title in enumerate(header):
            texts = [row[column][0] for row in rows if row[column][0] not in ("", "NaN")]
            if texts and all(number.match(t) for t in texts):
                for text in texts:
                    assert _three_significant_or_whole(text, texts), (title, text, texts)
            assert not any(re.search(r"\de[+-]\d", t) for t in texts), (title, texts)
            for text, hover in (row[column] for row in rows):
                if hover in run_ids:  # a shortened run id keeps its end and shows it all
                    assert text.endswith(hover[-8:]) and len(text) < len(hover)
                assert text not in run_ids or len(text) <= 24


def _three_significant_or_whole(text: str, column: list[str]) -> bool:
    """Whether ``text`` follows the rule: whole when its column is all whole, else three
    significant digits (every digit before the point kept, so 1,548 has four)."""
    if all("." not in t for t in column):
        return True  # counts, or decimals of 100 and more
    digits = text.replace(",", "").replace("-", "")
    if "." not in digits:
        return digits == "0" or int(digits) >= 100
    significant = digits.replace(".", "").lstrip("0")
    whole_part = digits.split(".")[0].lstrip("0")
    return len(significant) == max(3, len(whole_part))


def test_hbm_says_why_it_moves_no_bytes_and_no_setting_reads_none(root, tmp_path):
    html = _render(root, "dsa", tmp_path / "dsa.html")
    header, rows = next(t for t in _tables(html) if "bytes_read" in t[0])
    for row in rows:
        cells = dict(zip(header, (text for text, _ in row), strict=True))
        moved_nothing = cells["bytes_read"] == "0" and cells["blocks"] != "0"
        assert (cells["note"] == "read in place: no bytes move between tiers") == moved_nothing
    assert any(dict(zip(header, (t for t, _ in r), strict=True))["tier"] == "hbm" for r in rows)
    assert header.index("note") == header.index("tier") + 1  # seen beside what it explains
    result = kvtrace(
        "-w", str(root), "report", "workload", "--run", "mooncake", "-o", str(tmp_path / "w.html")
    )
    assert result.returncode == 0, result.stderr
    provenance = re.findall(r"<dt>([^<]*)</dt><dd>([^<]*)</dd>", (tmp_path / "w.html").read_text())
    # the selector's own values are told in its selection lines, never as internal names
    assert not any(key.startswith("Setting") for key, _ in provenance)
    assert not any("None" in key + value for key, value in provenance)


def test_the_dsa_report_shows_the_selection_shape_of_every_layer(root, tmp_path):
    html = _render(root, "dsa", tmp_path / "dsa.html")
    header, rows = next(t for t in _tables(html) if "lru_knee_blocks" in t[0])
    shown = [
        (row[0][1] or row[0][0], int(row[1][0]), int(row[-1][0].replace(",", ""))) for row in rows
    ]
    assert shown == query_rows(  # the report's block size: 64 (chat holds 16 and 64)
        root,
        "SELECT run_id, layer_id, lru_knee_blocks FROM dsa_shape_layers(64) "
        "WHERE run_id IN (SELECT run_id FROM runs WHERE kind = 'dsa') ORDER BY ALL",
    )
    assert header[:3] == ["run_id", "layer_id", "rows"] and "reuse_steps_p50" in header


def test_histograms_fit_their_bins_to_the_data_and_legends_keep_whole_labels(root, tmp_path):
    html = _render(root, "dsa", tmp_path / "dsa.html")
    specs = [
        json.loads(text)
        for text in re.findall(r'<script type="application/json" id="[^"]*">(.*?)</script>', html)
    ]
    assert all(s["config"]["legend"]["labelLimit"] >= 400 for s in specs)
    bins = next(s for s in specs if "ratio_bin_end" in json.dumps(s))["data"]["values"]
    shown = {tuple(b["series"].rsplit(" ", 1)[0].split(" B=")) for b in bins}  # run, size
    ratios = [
        ratio
        for run, size, ratio in query_rows(
            root,
            "SELECT run_id, block_size::VARCHAR, intersection_ratio FROM dsa_prefix_rows "
            "WHERE intersection_ratio IS NOT NULL",
        )
        if (run, size) in shown
    ]
    width = bins[0]["ratio_bin_end"] - bins[0]["ratio_bin"]
    assert (max(ratios) - min(ratios)) / 20 <= width * (1 + 1e-9)  # at most ~20 bins
    assert width < (max(ratios) - min(ratios)) / 4  # not a handful of fixed ones
    assert round(width / 10 ** math.floor(math.log10(width)), 9) in (1, 2, 5)
    assert sum(b["rows"] for b in bins) == len(ratios)


def test_a_series_of_one_row_is_drawn_as_a_point(tmp_path):
    import altair as alt

    from kvtrace.reports._charts import spec, with_lone_points
    from kvtrace.reports._html import RenderedSection, page

    rows = [
        {"x": 1, "y": 1, "s": "two"},
        {"x": 2, "y": 2, "s": "two"},
        {"x": 1, "y": 2, "s": "one"},
    ]
    line = alt.Chart(alt.Data(values=rows)).mark_line().encode(x="x:Q", y="y:Q", color="s:N")
    html = page(
        title="t",
        summary="",
        provenance=[],
        generated_at="",
        sections=[RenderedSection("s1", "lone", "", "", spec=spec(with_lone_points(line, ["s"])))],
    )
    (tmp_path / "lone.html").write_text(html)
    opened = open_report(tmp_path / "lone.html", ARTIFACTS / "report-lone-point.png")
    assert opened.console_errors == [] and opened.figures[0]["rendered"]
    assert opened.figures[0]["points"] == 1  # the lone row; the two-row series is a line


def test_the_dsa_report_reads_64_token_blocks_like_the_demo(root, tmp_path):
    """The chat run was traced at 16 and 64 tokens per block: the report reads 64 (the
    collector's default and the demo's summary), not the smallest."""
    html = _render(root, "dsa", tmp_path / "dsa.html")
    assert "read at 64-token blocks" in html
    header, rows = next(t for t in _tables(html) if "bytes_read" in t[0])
    assert {dict(zip(header, (t for t, _ in r), strict=True))["block_size"] for r in rows} == {"64"}


def test_compare_warns_when_both_sides_are_the_same_runs(root, tmp_path):
    output = tmp_path / "same.html"
    result = kvtrace(
        "-w", str(root), "report", "compare", "--experiment", "exp-a", "--experiment", "exp-a",
        "-o", str(output),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    html = output.read_text()
    assert '<p class="warning">Both sides select the same runs' in html
    # the relative-difference chart of zeros is one line, not an empty frame
    assert "<p>The two sides do not differ: every relative difference is 0.</p>" in html
    assert html.count("<dt>Selection</dt>") == 1
    different = _render(root, "compare", tmp_path / "different.html")
    assert "Both sides select the same runs" not in different

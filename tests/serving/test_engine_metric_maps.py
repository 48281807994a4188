"""The engine metric maps against the engines' own expositions, their generated SQL, and
``kvtrace collect pool`` reading vLLM's and LMCache's ``/metrics`` through a loopback server.

The expositions in tests/data/engine_metrics/ were written from vLLM 0.33.0's, SGLang
0.5.23's and LMCache 0.5.6's metric definitions (tests/data/README.md says how)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvtrace import connect
from kvtrace.collectors.engine_metric_maps import (
    ENGINE_METRICS,
    ENGINES,
    POOL_RULES,
    evaluate,
    generated_sql,
    metrics_of,
    sql_file,
)
from kvtrace.collectors.pool_poller import Endpoint, PollSpec, poll_once, poll_pool
from kvtrace.warehouse.schema.serving import POOL_SNAPSHOTS

DATA = Path(__file__).parents[1] / "data" / "engine_metrics"
EXPOSITIONS = {
    "vllm": DATA / "vllm-0.33.0.prom",
    "sglang": DATA / "sglang-0.5.23.prom",
    "lmcache": DATA / "lmcache-0.5.6.prom",
}


def families(engine: str) -> dict[str, tuple[str, set[str], set[str]]]:
    """family -> (type, sample names, label names) of an engine's exposition."""
    found = {}
    for family in text_string_to_metric_families(EXPOSITIONS[engine].read_text()):
        labels = {name for sample in family.samples for name in sample.labels}
        found[family.name] = (family.type, {s.name for s in family.samples}, labels)
    return found


@pytest.mark.parametrize("engine", ENGINES)
def test_every_mapped_metric_is_in_the_engines_exposition_with_its_type(engine):
    exposed = families(engine)
    for metric in metrics_of(engine):
        assert metric.family in exposed, metric.family
        kind, samples, labels = exposed[metric.family]
        assert kind == metric.kind, metric.family
        assert metric.sample in samples, metric.family  # a counter's sample ends in _total
        for label in (metric.split_by, metric.value_label):
            assert label is None or label in labels, (metric.family, label)


def test_each_engine_maps_its_own_quantities_once():
    for engine in ENGINES:
        quantities = [m.quantity for m in metrics_of(engine)]
        assert len(quantities) == len(set(quantities)), engine
    assert all(m.family.startswith(f"{m.engine}:") for m in ENGINE_METRICS)


def test_pool_rules_read_whole_quantities_of_their_engine_into_pool_columns():
    columns = set(POOL_SNAPSHOTS.schema.names)
    for rule in POOL_RULES:
        assert rule.column in columns
        quantities = {m.quantity: m for m in metrics_of(rule.engine)}
        names = {n for n in rule.expression.replace("(", " ").replace(")", " ").split()}
        for name in names - {"+", "-", "*", "/", "1", "1073741824"}:
            assert name in quantities, (rule, name)
            assert quantities[name].split_by is None, (rule, name)  # a part is no pool value


def test_pool_rule_expressions_give_none_for_a_missing_name_or_a_zero_divisor():
    assert evaluate("a + b * (1 - c)", {"a": 1.0, "b": 10.0, "c": 0.25}) == 8.5
    assert evaluate("a + b", {"a": 1.0}) is None
    assert evaluate("a / b", {"a": 1.0, "b": 0.0}) is None
    with pytest.raises(ValueError, match="only"):
        evaluate("a ** 2", {"a": 1.0})


def test_engine_metric_maps_sql_holds_what_the_tables_generate():
    assert sql_file().read_text() == generated_sql(), (
        "run: python -m kvtrace.collectors.engine_metric_maps"
    )


class Engine(BaseHTTPRequestHandler):
    """Answers /<engine>/metrics with that engine's exposition; /both/metrics with vLLM's
    and LMCache's together, as a vLLM server with LMCache inside it does."""

    bodies: ClassVar[dict[str, bytes]] = {
        **{name: path.read_bytes() for name, path in EXPOSITIONS.items()},
        "both": EXPOSITIONS["vllm"].read_bytes() + EXPOSITIONS["lmcache"].read_bytes(),
    }

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        body = self.bodies[self.path.strip("/").split("/")[0]]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


POOL_COLUMNS = (
    "capacity_tokens",
    "available_tokens",
    "held_tokens",
    "idle_evictable_tokens",
    "running_batch_size",
    "kvcache_mem_gb",
    "poll_error",
)

# vllm-0.33.0.prom: cache_config_info{num_gpu_blocks="2048", block_size="16"}, usage 0.25,
# 38 running: capacity 2048 x 16 = 32,768, available 32,768 x 0.75 = 24,576
VLLM_ROW = (32768, 24576, None, None, 38, None, None)
# lmcache-0.5.6.prom: lmcache:local_cache_usage 3000 bytes = 3000 / 2^30 GiB
LMCACHE_GB = 3000 / 2**30


def _polled(url: str) -> tuple:
    rows = poll_once(Endpoint.parse(f"decode-0={url}"), timeout_s=30.0)
    assert len(rows) == 1
    return tuple(rows[0].get(column) for column in POOL_COLUMNS)


def test_collect_pool_reads_vllm_and_lmcache_metrics(server):
    assert _polled(f"{server}/vllm/metrics") == VLLM_ROW
    assert _polled(f"{server}/lmcache/metrics") == (None,) * 5 + (LMCACHE_GB, None)
    both = _polled(f"{server}/both/metrics")
    assert both == (*VLLM_ROW[:5], LMCACHE_GB, None)


def test_sglangs_exposition_gives_todays_columns(server):
    # sglang-0.5.23.prom: kv_used_tokens 75, kv_available_tokens 67 (capacity 75 + 67 =
    # 142), streaming_session_held_tokens 152, kv_evictable_tokens 69, num_running_reqs 113
    assert _polled(f"{server}/sglang/metrics") == (142, 67, 152, 69, 113, None, None)


def test_a_poll_of_vllm_lands_in_pool_snapshots(warehouse, server):
    poll_pool(
        warehouse,
        [Endpoint.parse(f"decode-0={server}/both/metrics")],
        # one poll in the first second (jitter: 5 % of the interval), with a real timeout
        # no loaded machine runs out of
        PollSpec(interval_s=20.0, timeout_s=10.0, duration_s=1.5, batch_s=0.3, run_name="v"),
    )
    got = (
        connect(warehouse)
        .execute(
            "SELECT DISTINCT capacity_tokens, available_tokens, running_batch_size,"
            " kvcache_mem_gb, poll_error FROM pool_snapshots"
        )
        .fetchall()
    )
    assert got == [(32768, 24576, 38, LMCACHE_GB, None)]


GUIDE = Path(__file__).parents[2] / "docs" / "guides" / "engine-counters.md"


def guide_tables() -> str:
    """The mapping tables as the guide shows them, one per engine, then the pool rules."""
    parts = []
    for engine, title in (("vllm", "vLLM"), ("sglang", "SGLang"), ("lmcache", "LMCache")):
        lines = [
            f"#### {title}",
            "",
            "| metric, as exposed | kind | quantity | unit | part: label | combined by | counts |",
            "|---|---|---|---|---|---|---|",
        ]
        for m in metrics_of(engine):
            shown = m.sample + (f"{{{m.value_label}}}" if m.value_label else "")
            lines.append(
                f"| `{shown}` | {m.kind} | `{m.quantity}` | {m.unit} | {m.split_by or ''} "
                f"| {m.combine} | {m.meaning} |"
            )
        parts.append("\n".join(lines))
    rules = [
        "| engine | pool column | rule (first that gives a value) | to an integer |",
        "|---|---|---|---|",
    ]
    for rule in POOL_RULES:
        rounding = "" if rule.column == "kvcache_mem_gb" else rule.rounding
        rules.append(f"| {rule.engine} | `{rule.column}` | `{rule.expression}` | {rounding} |")
    return "\n\n".join(parts) + "\n\n#### Pool columns\n\n" + "\n".join(rules) + "\n"


def test_the_guide_shows_the_mapping_tables_as_they_are():
    assert guide_tables() in GUIDE.read_text(), "paste guide_tables() into the guide:\n" + (
        guide_tables()
    )


def test_a_pool_column_the_scrape_cannot_give_stays_empty_and_a_nan_it_reads_is_refused():
    from kvtrace.collectors._pool_sources import MalformedResponse, rows_from_prometheus

    # the pool's size unknown (num_gpu_blocks "None" before the engine profiled memory):
    # no capacity and no free tokens, only the running batch; a NaN in a metric no rule
    # reads changes nothing
    text = (
        '# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="16",'
        'num_gpu_blocks="None"} 1.0\n# TYPE vllm:kv_cache_usage_perc gauge\n'
        "vllm:kv_cache_usage_perc 0.5\n# TYPE vllm:num_requests_running gauge\n"
        "vllm:num_requests_running 2\n# TYPE vllm:num_requests_waiting gauge\n"
        "vllm:num_requests_waiting NaN\n"
    )
    row = rows_from_prometheus(text.encode(), "gpu0", None)[0]
    assert (row.get("capacity_tokens"), row.get("available_tokens")) == (None, None)
    assert row["running_batch_size"] == 2
    with pytest.raises(MalformedResponse, match="not a finite number: vllm:kv_cache_usage_perc"):
        rows_from_prometheus(text.replace("0.5", "NaN").encode(), "gpu0", None)
    with pytest.raises(MalformedResponse, match="no sglang:, vllm: or lmcache: metrics"):
        rows_from_prometheus(b"# TYPE up gauge\nup 1\n", "gpu0", None)

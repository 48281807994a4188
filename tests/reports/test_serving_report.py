"""The serving report's latency-against-load and batch-size charts, by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvtrace.ingest import ingest
from kvtrace.warehouse import Warehouse
from tests.conftest import warehouse_at
from tests.reports.browser import open_report
from tests.reports.test_reports import ARTIFACTS
from tests.test_cli import kvtrace


def _bench(rate: float, ttfts: list[float]) -> dict:
    """A `vllm bench serve` result at ``rate`` requests/s, requests of 2 output tokens
    whose one inter-token gap is 20 ms at rate 2 and 30 ms at rate 4."""
    gap = 0.02 if rate == 2.0 else 0.03
    return {
        "backend": "vllm",
        "model_id": "m",
        "request_rate": rate,
        "duration": 10.0,
        "completed": len(ttfts),
        "input_lens": [100] * len(ttfts),
        "output_lens": [2] * len(ttfts),
        "ttfts": ttfts,
        "itls": [[gap] for _ in ttfts],
        "errors": [""] * len(ttfts),
    }


# Batches of sizes 1, 1, 2, 4 taking 0.01, 0.01, 0.02 and 0.06 s: shares 1/2, 1/4, 1/4 of
# the batches and 0.2, 0.2, 0.6 of the time.
BATCHES = (
    "batch_size,batch_num_prefill_tokens,batch_num_decode_tokens,batch_execution_time\n"
    "1,100,0,0.01\n1,0,1,0.01\n2,0,2,0.02\n4,200,2,0.06\n"
)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("serving-report")
    warehouse = Warehouse(warehouse_at(folder / "wh"), create=True)
    for rate, ttfts in ((2.0, [0.1, 0.2, 0.3]), (4.0, [0.2, 0.4, 0.9])):
        path = folder / f"bench-{rate:g}.json"
        path.write_text(json.dumps(_bench(rate, ttfts)))
        ingest(warehouse, [str(path)], experiment="sweep", run_name=f"rate-{rate:g}")
    (folder / "batch_metrics.csv").write_text(BATCHES)
    ingest(warehouse, [str(folder / "batch_metrics.csv")], run_name="vidur")
    output = folder / "serving.html"
    result = kvtrace("-w", str(warehouse.root), "report", "serving", "--output", str(output))
    assert result.returncode == 0, result.stderr
    return output


def _anchor(html: str, title: str) -> str:
    found = re.search(rf'<section id="(s\d+)">\s*<h2>{re.escape(title)}</h2>', html)
    assert found, title
    return found.group(1)


def _values(html: str, title: str) -> list[dict]:
    """The inline data of the chart under ``title``."""
    anchor = _anchor(html, title)
    spec = re.search(rf'<script type="application/json" id="{anchor}-spec">(.*?)</script>', html)
    assert spec, title
    found = json.loads(spec.group(1))
    datasets = [found.get("data", {}).get("values")]
    datasets += list(found.get("datasets", {}).values())
    return next(values for values in datasets if values)


def test_the_batch_size_distribution(report):
    rows = _values(report.read_text(), "Batch-size distribution")
    got = {(r["batch_size"], r["batches"], r["share"], r["time_share"]) for r in rows}
    assert got == {(1, 2, 0.5, 0.2), (2, 1, 0.25, 0.2), (4, 1, 0.25, 0.6)}


def test_latency_against_the_rate_asked_for(report):
    rows = _values(report.read_text(), "Latency against load")
    points = {(r["metric"], r["statistic"], r["request_rate"]): r["latency_ms"] for r in rows}
    # medians of the TTFTs (0.1, 0.2, 0.3) and (0.2, 0.4, 0.9); p99 linear: 0.298, 0.89;
    # TPOT of two tokens is the one gap: 20 and 30 ms
    assert points[("TTFT", "median", 2.0)] == pytest.approx(200)
    assert points[("TTFT", "median", 4.0)] == pytest.approx(400)
    assert points[("TTFT", "p99", 2.0)] == pytest.approx(298)
    assert points[("TTFT", "p99", 4.0)] == pytest.approx(890)
    assert points[("TPOT", "median", 2.0)] == pytest.approx(20)
    assert points[("TPOT", "p99", 4.0)] == pytest.approx(30)


def test_the_new_charts_render(report, tmp_path):
    opened = open_report(report, ARTIFACTS / "report-serving-load.png")
    assert opened.console_errors == [] and opened.overflows == []
    figures = {figure["id"]: figure for figure in opened.figures}
    html = report.read_text()
    for title in ("Latency against load", "Batch-size distribution"):
        figure = figures[f"{_anchor(html, title)}-figure"]
        assert figure["rendered"] and not figure["error"] and figure["marks"] > 0, figure

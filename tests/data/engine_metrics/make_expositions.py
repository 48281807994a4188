"""Write the engines' Prometheus expositions kept in this folder.

Run from an unpacked wheel of each engine (``pip download --no-deps ENGINE`` and unzip):

    python tests/data/engine_metrics/make_expositions.py vllm   SRC > vllm.prom
    python tests/data/engine_metrics/make_expositions.py sglang SRC > sglang.prom
    python tests/data/engine_metrics/make_expositions.py lmcache SRC > lmcache.prom

``SRC`` is the folder holding the engine's package.  LMCache's ``PrometheusLogger`` runs
as it is (its pure-Python dependencies on the path), fed one ``LMCacheStats``.  vLLM's
and SGLang's collectors need the whole engine to start, so their metric definitions
are read from the source instead: every ``Counter``, ``Gauge``, ``Histogram`` or
``Summary`` constructor (the engines' ``_counter_cls``-style aliases and
vLLM's offloading metadata too) whose name is a string in the source is registered,
with its label names, in a fresh prometheus_client registry, one series each, and the
registry is written as prometheus_client writes it.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import sys
import types
import typing
from pathlib import Path

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary

KINDS = {
    "Counter": "counter",
    "Gauge": "gauge",
    "Histogram": "histogram",
    "Summary": "summary",
    "_counter_cls": "counter",
    "_gauge_cls": "gauge",
    "_histogram_cls": "histogram",
    "_create_counter": "counter",
    "_create_gauge": "gauge",
    "_create_histogram": "histogram",
    "OffloadingCounterMetadata": "counter",
    "OffloadingGaugeMetadata": "gauge",
    "OffloadingHistogramMetadata": "histogram",
}
BASE_LABELS = {
    "vllm": ["model_name", "engine"],
    "sglang": ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"],
}
SOURCES = {
    "vllm": [
        "vllm/v1/metrics/loggers.py",
        "vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py",
        "vllm/v1/kv_offload/cpu/spec.py",
        "vllm/v1/kv_offload/cpu/common.py",
    ],
    "sglang": ["sglang/srt/observability/metrics_collector.py"],
}


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module- and class-level string constants, by bare and dotted name."""
    found: dict[str, str] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{node.name}.")
            elif _string_assignment(node):
                for target in node.targets:  # type: ignore[attr-defined]
                    if isinstance(target, ast.Name):
                        found[prefix + target.id] = node.value.value  # type: ignore[attr-defined]

    visit(tree.body, "")
    for node in ast.walk(tree):  # names bound once inside a function (vLLM's info gauge)
        if _string_assignment(node) and ":" in node.value.value:  # type: ignore[attr-defined]
            for target in node.targets:  # type: ignore[attr-defined]
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, node.value.value)  # type: ignore[attr-defined]
    return found


def _string_assignment(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _text(node: ast.AST | None, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if node is not None:
        return constants.get(ast.unparse(node))
    return None


def _labels(node: ast.AST | None, base: list[str]) -> list[str]:
    """Label names of a ``labelnames=`` argument: literals added to the engine's base."""
    if node is None:
        return []
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    if isinstance(node, ast.BinOp):
        return _labels(node.left, base) + _labels(node.right, base)
    return list(base)


def definitions(engine: str, source: Path) -> dict[str, tuple[str, list[str]]]:
    """Metric name -> (kind, label names) of every definition in the engine's files."""
    found: dict[str, tuple[str, list[str]]] = {}
    texts = {path: (source / path).read_text() for path in SOURCES[engine]}
    constants: dict[str, str] = {}
    trees = {path: ast.parse(text) for path, text in texts.items()}
    for tree in trees.values():
        constants.update(_constants(tree))
    for tree in trees.values():
        for node in ast.walk(tree):
            pairs: list[tuple[ast.AST | None, ast.AST]] = []
            if isinstance(node, ast.Dict):  # vLLM: {NAME: Offloading...Metadata(...)}
                pairs = list(zip(node.keys, node.values, strict=True))
            elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
                pairs = [(node.targets[0].slice, node.value)]  # definitions[NAME] = ...
            if pairs:
                for key, value in pairs:
                    if isinstance(value, ast.Call) and ast.unparse(value.func) in KINDS:
                        name = _text(key, constants)
                        if name:
                            keywords = {k.arg: k.value for k in value.keywords}
                            extra = _labels(keywords.get("labelnames"), [])
                            found.setdefault(
                                name, (KINDS[ast.unparse(value.func)], BASE_LABELS[engine] + extra)
                            )
            if not isinstance(node, ast.Call):
                continue
            callee = ast.unparse(node.func).split(".")[-1]
            if callee not in KINDS or callee.startswith("Offloading"):
                continue
            keywords = {k.arg: k.value for k in node.keywords}
            name = _text(keywords.get("name"), constants)
            if name and name.startswith(f"{engine}:"):
                labels = _labels(keywords.get("labelnames"), BASE_LABELS[engine])
                if name == "vllm:cache_config_info":  # labels: CacheConfig's fields, and engine
                    labels = [*_cache_config_fields(source), "engine"]
                found[name] = (KINDS[callee], labels)
    return found


def _cache_config_fields(source: Path) -> list[str]:
    """vLLM's ``CacheConfig.metrics_info()`` keys: the dataclass's fields."""
    tree = ast.parse((source / "vllm/config/cache.py").read_text())
    config = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CacheConfig")
    return [
        n.target.id
        for n in config.body
        if isinstance(n, ast.AnnAssign)
        and isinstance(n.target, ast.Name)
        and "ClassVar" not in ast.unparse(n.annotation)
    ]


def exposition_from_source(engine: str, source: Path) -> str:
    registry = CollectorRegistry()
    classes = {"counter": Counter, "gauge": Gauge, "histogram": Histogram, "summary": Summary}
    for index, (name, (kind, labels)) in enumerate(sorted(definitions(engine, source).items())):
        metric = classes[kind](
            name, f"{name} as {engine} defines it", labelnames=labels, registry=registry
        )
        child = metric.labels(*[_label_value(label) for label in labels]) if labels else metric
        if kind == "counter":
            child.inc(10 * (index + 1))
        elif kind == "gauge" and name.endswith("_info"):
            child.set(1)  # an info gauge is 1, its facts are its labels
        elif kind == "gauge" and any(word in name for word in ("perc", "rate", "usage")):
            child.set(0.25)  # a share
        elif kind == "gauge":
            child.set(index + 1)
        else:
            child.observe(0.5)
    return prometheus_client.generate_latest(registry).decode()


def _label_value(label: str) -> str:
    return {
        "model_name": "Qwen/Qwen3-8B",
        "engine": "0",
        "transfer_type": "GPU_to_CPU",
        "block_size": "16",
        "num_gpu_blocks": "2048",
    }.get(label, "0")


def exposition_of_lmcache(source: Path) -> str:
    sys.path.insert(0, str(source))
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(Path.cwd() / "lmcache_prometheus"))
    import lmcache.observability as observability

    labels = types.SimpleNamespace(
        model_name="Qwen/Qwen3-8B", worker_id=0, role="worker", served_model_name="qwen3-8b"
    )
    logger = observability.PrometheusLogger(labels, None)
    hints = typing.get_type_hints(observability.LMCacheStats)
    values: dict[str, object] = {}
    for index, field in enumerate(dataclasses.fields(observability.LMCacheStats)):
        hint = hints[field.name]
        if typing.get_origin(hint) is list:
            values[field.name] = [0.01 * (index + 1), 0.02 * (index + 1)]
        elif typing.get_origin(hint) is dict:
            values[field.name] = {}
        elif hint is float:  # the rates
            values[field.name] = 0.25
        else:
            values[field.name] = 100 * (index + 1) if hint is int else None
    logger.log_prometheus(observability.LMCacheStats(**values))
    return prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()


if __name__ == "__main__":
    engine, folder = sys.argv[1], Path(sys.argv[2])
    text = (
        exposition_of_lmcache(folder)
        if engine == "lmcache"
        else exposition_from_source(engine, folder)
    )
    sys.stdout.write(text)

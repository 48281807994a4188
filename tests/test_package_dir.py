"""``dir(kvtrace)`` lists the lazy public names (what a notebook completes) without
importing them: ``import kvtrace`` stays light."""

from __future__ import annotations

import json
import subprocess
import sys

import kvtrace

LAZY_PUBLIC = {"connect", "Warehouse", "DsaTracer", "trace", "record_topk", "current_tracer"}


def test_dir_lists_every_public_name():
    names = dir(kvtrace)
    assert LAZY_PUBLIC | {"charts"} <= set(names)
    assert set(kvtrace.__all__) <= set(names)
    assert names == sorted(names)


def test_dir_imports_none_of_them():
    probe = (
        "import json, sys, kvtrace; names = dir(kvtrace); "
        "print(json.dumps(['connect' in names, sorted(m for m in "
        "('kvtrace.analysis', 'kvtrace.warehouse', 'kvtrace.charts', 'pyarrow', 'duckdb') "
        "if m in sys.modules)]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout) == [True, []]

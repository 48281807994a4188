"""The package's layers, read from its import statements (function-level ones included)."""

from __future__ import annotations

import ast
from pathlib import Path

import kvtrace

PACKAGE = Path(kvtrace.__file__).parent

# the layers above the kernels: what a self-contained layer may not import
ABOVE_KERNELS = {
    "warehouse",
    "sql",
    "analysis",
    "ingest",
    "collectors",
    "reports",
    "distributed",
    "cli",
}
# layer -> kvtrace packages its modules may not import
FORBIDDEN = {
    "kernels": ABOVE_KERNELS,
    "warehouse": {"sql", "analysis", "ingest", "collectors", "reports", "distributed", "cli"},
    "sql": {"analysis", "ingest", "collectors", "reports", "distributed", "cli"},
    "analysis": {"ingest", "collectors", "reports", "distributed", "cli"},
    "ingest": {"sql", "analysis", "collectors", "reports", "distributed", "cli"},
    "collectors": {"sql", "analysis", "ingest", "reports", "distributed", "cli"},
    "reports": {"ingest", "collectors", "distributed", "cli"},
    "distributed": {"collectors", "reports", "cli"},
    "samples": ABOVE_KERNELS | {"kernels"},
    "synthetic": ABOVE_KERNELS,
}
TOP_LEVEL_MODULES = {
    "__init__",
    "__main__",
    "_version",
    "cli",
    "defaults",
    "errors",
    "prefetch",
}


def _kvtrace_imports(path: Path) -> set[str]:
    """The first component under ``kvtrace.`` of every module ``path`` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "kvtrace":
                names = [f"kvtrace.{alias.name}" for alias in node.names]
        found.update(n.split(".")[1] for n in names if n.startswith("kvtrace."))
    return found


def test_each_layer_imports_only_the_layers_below_it():
    crossings = []
    for layer, forbidden in FORBIDDEN.items():
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            for target in _kvtrace_imports(path) & forbidden:
                crossings.append(f"{path.relative_to(PACKAGE)} imports kvtrace.{target}")
    assert crossings == []


def _private_names_imported(path: Path, package: str) -> list[str]:
    """Names starting with ``_`` that ``path`` imports from ``kvtrace.<package>``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.startswith(f"kvtrace.{package}")
        ):
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return found


def test_the_distributed_engine_uses_only_public_names_of_the_analysis_layer():
    private = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in sorted((PACKAGE / "distributed").rglob("*.py"))
        for name in _private_names_imported(path, "analysis")
    ]
    assert private == []


def test_the_top_level_holds_only_the_entry_points_and_shared_basics():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert modules == TOP_LEVEL_MODULES


def test_the_checker_sees_a_crossing(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from kvtrace.ingest.dsa import read_dsa_file\n")
    assert _kvtrace_imports(module) == {"ingest"}

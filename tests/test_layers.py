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
    "export",
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
    "export": {"ingest", "collectors", "reports", "distributed", "cli"},
    "distributed": {"collectors", "reports", "cli"},
    "charts": {"ingest", "collectors", "distributed", "cli"},
    "samples": ABOVE_KERNELS | {"kernels"},
    "synthetic": ABOVE_KERNELS,
}
TOP_LEVEL_MODULES = {
    "__init__",
    "__main__",
    "_version",
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


# sub-layers inside a layer: folder -> kvtrace packages its modules may not import
WAREHOUSE_CORE = ["warehouse", "warehouse/schema"]
FORBIDDEN_INSIDE = {
    **{core: {"kvtrace.warehouse.rows", "kvtrace.warehouse.ops"} for core in WAREHOUSE_CORE},
    "warehouse/rows": {"kvtrace.warehouse.ops"},
}


def test_the_warehouse_core_imports_neither_its_row_builders_nor_its_operations():
    crossings = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for folder, forbidden in FORBIDDEN_INSIDE.items()
        for path in sorted((PACKAGE / folder).glob("*.py"))
        for name in _imports_with_names(path)
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]
    assert crossings == []


# the family registry is the one ingest machinery module that knows the families' readers
INGEST_REGISTRY = "families.py"


def test_no_ingest_machinery_module_but_the_registry_imports_the_readers():
    crossings = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in sorted((PACKAGE / "ingest").glob("*.py"))
        if path.name != INGEST_REGISTRY
        for name in _imports_with_names(path)
        if name.startswith("kvtrace.ingest.readers")
    ]
    assert crossings == []


def _imports_with_names(path: Path) -> list[str]:
    """Every dotted name ``path`` imports: modules, and ``module.name`` for each from-import."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [f"{node.module}.{alias.name}" for alias in node.names]
    return [name for name in found if name.startswith("kvtrace.")]


def _package_of(path: Path) -> str:
    """The dotted package a module of kvtrace lives in."""
    return ".".join(path.relative_to(PACKAGE.parent).parent.parts)


def _owner_of_private_part(dotted: str) -> str | None:
    """The package a private module or name in ``dotted`` belongs to, if it names one.

    ``kvtrace.warehouse._store.Warehouse`` belongs to ``kvtrace.warehouse``, as does
    ``kvtrace.warehouse.ops.maintenance._settle`` to ``kvtrace.warehouse.ops``.
    """
    parts = dotted.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            as_path = PACKAGE.parent.joinpath(*parts[: index + 1])
            is_module = as_path.with_suffix(".py").exists() or as_path.is_dir()
            return ".".join(parts[:index] if is_module else parts[: index - 1])
    return None


def private_crossings(path: Path, home: str | None = None) -> list[str]:
    """The private modules and names ``path`` imports from outside its package, ``home``."""
    home = home or _package_of(path)
    crossings = []
    for dotted in _imports_with_names(path):
        owner = _owner_of_private_part(dotted)
        if owner is not None and home != owner and not home.startswith(owner + "."):
            crossings.append(dotted)
    return crossings


def test_no_package_imports_another_package_s_private_modules_or_names():
    crossings = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "vendor" not in path.parts
        for name in private_crossings(path)
    ]
    assert crossings == []


def test_the_top_level_holds_only_the_entry_points_and_shared_basics():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert modules == TOP_LEVEL_MODULES


def test_the_checker_sees_a_crossing(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from kvtrace.ingest.readers.dsa import read_dsa_file\n")
    assert _kvtrace_imports(module) == {"ingest"}


def test_the_checker_sees_a_private_crossing(tmp_path):
    reader = tmp_path / "reader.py"
    reader.write_text(
        "from kvtrace.warehouse import _journal\n"
        "from kvtrace.warehouse.ops.maintenance import _settle\n"
        "from kvtrace.ingest import _lines\n"
    )
    assert private_crossings(reader, home="kvtrace.ingest.readers") == [
        "kvtrace.warehouse._journal",
        "kvtrace.warehouse.ops.maintenance._settle",
    ]
    machinery = tmp_path / "machinery.py"
    machinery.write_text("from kvtrace.ingest.readers import _export_names\n")
    assert private_crossings(machinery, home="kvtrace.ingest") == [
        "kvtrace.ingest.readers._export_names"
    ]


def _module_name(path: Path) -> str:
    """The dotted name of a module of kvtrace (a package by its own name)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _warehouse_import_graph() -> dict[str, set[str]]:
    """Module -> the kvtrace.warehouse modules it imports (at module or function level);
    ``from package import module`` counts as importing the module."""
    paths = sorted((PACKAGE / "warehouse").rglob("*.py"))
    modules = {_module_name(path) for path in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    dotted = f"{node.module}.{alias.name}"
                    targets.add(dotted if dotted in modules else node.module)
        graph[_module_name(path)] = (targets & modules) - {_module_name(path)}
    return graph


def test_the_warehouse_modules_import_no_circle():
    graph = _warehouse_import_graph()
    done: set[str] = set()
    circles: list[str] = []

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            circles.append(" -> ".join([*path[path.index(module) :], module]))
            return
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert circles == []

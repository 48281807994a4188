"""Keep pyarrow from importing pandas in kvtrace's own processes (commands, workers)."""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["pyarrow_without_pandas"]


def pyarrow_without_pandas() -> None:
    """Let pyarrow's one look for pandas find none in this process, whenever pyarrow loads.

    pyarrow imports pandas (0.2 s, 40 MB) at its first conversion of a Python value, only
    to ask whether the value is a pandas object; a command never hands it one.  With
    pandas hidden for that first look, pyarrow skips the question from then on, and an
    explicit ``to_pandas()`` still imports pandas when something asks for it.  A command
    that never loads pyarrow (a query whose snapshot is kept on disk) does not load it
    for this: the look happens right after pyarrow's own import.
    """
    if "pandas" in sys.modules:
        return
    if "pyarrow" in sys.modules:
        _first_look()
    elif _AFTER_PYARROW not in sys.meta_path:
        sys.meta_path.insert(0, _AFTER_PYARROW)


def _first_look() -> None:
    sys.meta_path.insert(0, _NO_PANDAS)
    try:
        import pyarrow as pa

        pa.scalar(0)  # the first conversion, where pyarrow looks
    finally:
        sys.meta_path.remove(_NO_PANDAS)


class _AfterPyarrow:
    """An import finder that has pyarrow, once imported, take its look without pandas."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if name != "pyarrow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        load = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            load(module)
            _first_look()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


class _HiddenPandas:
    """An import finder under which ``import pandas`` fails."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is hidden from pyarrow's first look")


_NO_PANDAS = _HiddenPandas()
_AFTER_PYARROW = _AfterPyarrow()

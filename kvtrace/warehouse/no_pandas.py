"""Keep pyarrow from importing pandas in kvtrace's own processes (commands, workers)."""

from __future__ import annotations

import sys


def pyarrow_without_pandas() -> None:
    """Let pyarrow's one look for pandas find none in this process.

    pyarrow imports pandas (0.2 s, 40 MB) at its first conversion of a Python value, only
    to ask whether the value is a pandas object; a command never hands it one.  With
    pandas hidden for that first look, pyarrow skips the question from then on, and an
    explicit ``to_pandas()`` still imports pandas when something asks for it.
    """
    if "pandas" in sys.modules:
        return
    sys.meta_path.insert(0, _NO_PANDAS)
    try:
        import pyarrow as pa

        pa.scalar(0)  # the first conversion, where pyarrow looks
    finally:
        sys.meta_path.remove(_NO_PANDAS)


class _HiddenPandas:
    """An import finder under which ``import pandas`` fails."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is hidden from pyarrow's first look")


_NO_PANDAS = _HiddenPandas()

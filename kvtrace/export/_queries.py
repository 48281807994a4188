"""The export's SQL: named queries in ``queries/<export>.sql``, each under a header

    -- @query name
    -- What the query selects, its columns.
    SELECT ...

reading the run given as the parameter ``$run``.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^-- @query (\w+)\s*$", re.MULTILINE)


@cache
def load_queries(export: str) -> dict[str, str]:
    """The named queries of ``queries/<export>.sql``, each with its comment header."""
    text = resources.files("kvtrace.export").joinpath(f"queries/{export}.sql").read_text()
    marks = list(_HEADER.finditer(text))
    return {
        mark.group(1): text[
            mark.start() : marks[i + 1].start() if i + 1 < len(marks) else len(text)
        ].strip()
        for i, mark in enumerate(marks)
    }

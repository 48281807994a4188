"""Files of named queries (the reports' and the exports'), each query under a header

-- @query name
-- What the query selects, its columns.
SELECT ...
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^-- @query (\w+)\s*$", re.MULTILINE)


@cache
def named_queries(package: str, name: str) -> dict[str, str]:
    """The named queries of ``queries/<name>.sql`` in ``package``, each with its header."""
    text = resources.files(package).joinpath(f"queries/{name}.sql").read_text()
    marks = list(_HEADER.finditer(text))
    return {
        mark.group(1): text[
            mark.start() : marks[i + 1].start() if i + 1 < len(marks) else len(text)
        ].strip()
        for i, mark in enumerate(marks)
    }

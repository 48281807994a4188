"""MkDocs hook: the site's home page is the README (one text, on GitHub and on the site).

``docs/index.md`` holds a placeholder; its source is replaced by the README's, with the
README's links into ``docs/`` made relative to the site.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parent.parent / "README.md"


def on_page_read_source(page: Any, config: Any) -> str | None:
    if page.file.src_uri != "index.md":
        return None
    return README.read_text().replace("](docs/", "](")

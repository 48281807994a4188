"""The ``NAME=URL`` form of a collector's endpoints (``--endpoint decode-0=http://...``)."""

from __future__ import annotations


def labelled(text: str) -> tuple[str, str]:
    """``NAME=URL`` or a bare URL as (name, url); a bare URL is named after its host and
    port."""
    name, _, url = text.partition("=") if "=" in text.split("://")[0] else ("", "", text)
    return name or url.split("://", 1)[-1].split("/", 1)[0], url

"""The Altair renderer `kvtrace.charts.inline` turns on: each chart as Vega-Lite's own
mimetype, which a front end that draws Vega-Lite itself shows with no network, beside
Altair's HTML output (Vega loaded from a CDN) for every other front end."""

from __future__ import annotations

from importlib import import_module
from typing import Any

import altair as alt

NAME = "kvtrace"


def vegalite_mimetype() -> str:
    """``application/vnd.vegalite.vN+json`` for the Vega-Lite major version Altair writes
    (Altair 6's own renderer writes ``.vN.json``, a name nbformat refuses for a dict)."""
    return f"application/vnd.vegalite.{_major()}+json"


def bundle(spec: dict, **metadata: Any) -> dict[str, Any]:
    """The display bundle of one chart's spec: the Vega-Lite mimetype, Altair's HTML
    output and its plain-text stand-in."""
    html_renderer = import_module(f"altair.vegalite.{_major()}.display").html_renderer
    drawn: dict[str, Any] = dict(html_renderer(spec, **metadata))
    drawn[vegalite_mimetype()] = spec
    return drawn


def enable() -> None:
    """Register the renderer (once) and make it Altair's active one."""
    if NAME not in alt.renderers.names():
        alt.renderers.register(NAME, bundle)
    alt.renderers.enable(NAME)


def _major() -> str:
    return alt.SCHEMA_VERSION.split(".")[0]  # "v6.4.1" -> "v6"

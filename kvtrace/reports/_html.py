"""One self-contained HTML page: tables in plain HTML, charts as Vega-Lite specs drawn by
the inlined Vega libraries (no network request), every string from the data escaped."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from html import escape
from importlib import resources
from typing import Any

import pyarrow as pa

from kvtrace.reports._format import number_column
from kvtrace.sql.text_table import cell_text

VENDOR = ("vega.min.js", "vega-lite.min.js", "vega-embed.min.js")

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px;
       padding: 0 1em; color: #1b1b1b; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
dl.provenance { display: grid; grid-template-columns: max-content 1fr; gap: 0.2em 1em; }
dl.provenance dt { font-weight: 600; } dl.provenance dd { margin: 0; }
code, pre { font: 12px/1.4 ui-monospace, monospace; }
pre { background: #f6f8fa; padding: 0.8em; overflow-x: auto; }
.table-scroll { max-width: 100%; overflow-x: auto; margin: 0.5em 0; }
table { border-collapse: collapse; }
td.text { white-space: nowrap; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; } td.text, th.text { text-align: left; }
.warning { background: #fff4e5; border-left: 4px solid #e8590c; padding: 0.5em 1em; }
.figure { min-height: 60px; } .caption { color: #555; } .generated { color: #777; }
"""

EMBED = """
document.querySelectorAll("[data-spec]").forEach(function (box) {
  var spec = JSON.parse(document.getElementById(box.dataset.spec).textContent);
  vegaEmbed(box, spec, {renderer: "svg", actions: false})
    .then(function () { box.dataset.rendered = "true"; })
    .catch(function (error) {
      box.dataset.error = String(error);
      box.textContent = "This figure could not be drawn: " + error;
      console.error(error);
    });
});
"""


@dataclass
class RenderedSection:
    anchor: str
    title: str
    caption: str
    sql: str
    spec: dict | None = None  # a chart
    table: pa.Table | None = None  # a table
    max_rows: int = 200
    empty: str = ""
    warning: str = ""


def page(
    *,
    title: str,
    summary: str,
    provenance: list[tuple[str, str]],
    generated_at: str,
    sections: list[RenderedSection],
    warning: str = "",
) -> str:
    """The whole report as one HTML document; a provenance value of several lines shows
    them one under another; ``warning`` (about the whole selection) shows under them."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{escape(title)}</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>{escape(title)}</h1>",
        f"<p>{escape(summary)}</p>",
        '<dl class="provenance">',
    ]
    parts += [
        f"<dt>{escape(k)}</dt><dd>{'<br>'.join(escape(line) for line in v.splitlines())}</dd>"
        for k, v in provenance
    ]
    parts.append("</dl>")
    if warning:
        parts.append(f'<p class="warning">{escape(warning)}</p>')
    parts += [f'<p class="generated">Generated at {escape(generated_at)}</p>', "<nav><ol>"]
    parts += [f'<li><a href="#{s.anchor}">{escape(s.title)}</a></li>' for s in sections]
    parts.append("</ol></nav>")
    specs: list[tuple[str, dict]] = []
    for section in sections:
        parts += _section(section, specs)
    parts += [f"<script>{_vendor(name)}</script>" for name in VENDOR]
    parts += [
        f'<script type="application/json" id="{anchor}-spec">{_script_json(spec)}</script>'
        for anchor, spec in specs
    ]
    parts += [f"<script>{EMBED}</script>", "</body>", "</html>"]
    return "\n".join(parts) + "\n"


def _section(section: RenderedSection, specs: list[tuple[str, dict]]) -> list[str]:
    out = [f'<section id="{section.anchor}">', f"<h2>{escape(section.title)}</h2>"]
    if section.caption:
        out.append(f'<p class="caption">{escape(section.caption)}</p>')
    if section.warning:
        out.append(f'<p class="warning">{escape(section.warning)}</p>')
    if section.spec is not None:
        specs.append((section.anchor, section.spec))
        out += [
            f'<div class="figure" id="{section.anchor}-figure" '
            f'data-spec="{section.anchor}-spec"></div>',
            "<noscript>This figure needs JavaScript; the query below gives its numbers.</noscript>",
        ]
    elif section.table is not None and section.table.num_rows:
        out.append(html_table(section.table, section.max_rows))
    else:
        out.append(f"<p>{escape(section.empty)}</p>")
    out += [
        "<details><summary>SQL</summary>",
        f"<pre>{escape(section.sql)}</pre>",
        "</details>",
        "</section>",
    ]
    return out


def html_table(table: pa.Table, max_rows: int) -> str:
    """An HTML table of the first ``max_rows`` rows, saying how many were left out:
    numbers written by the reports' rule (`kvtrace.reports._format`), run ids and long
    text shortened with the whole value on hover, inside a box that scrolls when the
    table is wide."""
    shown = table.slice(0, max_rows)
    columns = [_cells(name, shown[name].to_pylist()) for name in table.column_names]
    head = "".join(
        f"<th>{escape(name)}</th>" if numeric else f'<th class="text">{escape(name)}</th>'
        for name, (_, numeric) in zip(table.column_names, columns, strict=True)
    )
    body = "".join(
        f"<tr>{''.join(row)}</tr>" for row in zip(*(cells for cells, _ in columns), strict=True)
    )
    more = (
        f"<p>{table.num_rows - max_rows:,} more rows not shown.</p>"
        if table.num_rows > max_rows
        else ""
    )
    return (
        f'<div class="table-scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>{more}"
    )


_RUN_ID = re.compile(r"^(.+)-([0-9a-f]{8})$")
RUN_ID_SHOWN = 24  # characters of a run id shown in full; longer ones are shortened
TEXT_SHOWN = 60  # characters of other text shown in full


def _cells(name: str, values: list[Any]) -> tuple[list[str], bool]:
    """The ``<td>`` elements of one column, and whether it is numeric."""
    texts, numeric = number_column(values)
    if numeric:
        return [f"<td>{escape(text)}</td>" for text in texts], True
    runs = "run" in name
    return [
        f'<td class="text">{"" if v is None else _shortened(cell_text(v), runs)}</td>'
        for v in values
    ], False


def _shortened(text: str, runs: bool) -> str:
    """``text`` escaped; a long run id (``name-<8 hex>``) keeps its start and its hex, other
    long text its start, with the whole of it in the title shown on hover."""
    if runs and len(text) > RUN_ID_SHOWN and (match := _RUN_ID.match(text)):
        short = f"{match[1][: RUN_ID_SHOWN - 10]}…-{match[2]}"
    elif len(text) > TEXT_SHOWN:
        short = text[: TEXT_SHOWN - 1] + "…"
    else:
        return escape(text)
    return f'<span title="{escape(text)}">{escape(short)}</span>'


def _script_json(spec: dict) -> str:
    """JSON that cannot end its <script> element early: <, > and & are escaped."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _vendor(name: str) -> str:
    text = resources.files("kvtrace.reports").joinpath(f"vendor/{name}").read_text()
    # A source-map comment would make developer tools fetch a file that is not there.
    return "\n".join(
        line for line in text.splitlines() if not line.startswith("//# sourceMappingURL")
    )

"""The docs site's console blocks: a command's continuation lines are the command's (the
stylesheet wraps commands and keeps output in columns)."""

from __future__ import annotations

from tests.test_docs import ROOT, _script

GP, GO = '<span class="gp">$ </span>', '<span class="go">'


def test_continuation_lines_are_the_commands_and_output_stays_output():
    hooks = _script("mkdocs_hooks")
    code = "\n".join(
        [
            GP + 'kvtrace<span class="w"> </span>sql<span class="w"> </span>'
            '<span class="s2">"SELECT a,</span>',
            GO + "  b FROM t WHERE c = &#39;x&#39;&quot;</span>",  # closes the quote
            GO + "a  b</span>",
            GP + "cat &gt; f.jsonl &lt;&lt;'JSON'",
            GO + '{"k": "v"}</span>',
            GO + "JSON</span>",
            GP + "kvtrace ingest f.jsonl \\",
            GO + "  --run-name x</span>",
            GO + "1 rows ingested</span>",
        ]
    )
    html = f"<p>x</p><pre><span></span><code>{code}</code></pre>"
    lines = hooks.on_page_content(html, None, None, None).split("\n")
    classes = [line.split('"')[1] for line in lines]
    assert classes == ["gp", "s2", "go", "gp", "sh", "sh", "gp", "w", "go"]


def test_the_site_has_the_stylesheet_that_wraps_commands():
    assert "extra_css:\n  - stylesheets/extra.css" in (ROOT / "mkdocs.yml").read_text()
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text()
    assert "code:has(> .gp)" in css and "white-space: pre-wrap" in css

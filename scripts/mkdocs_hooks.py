"""MkDocs hooks: the site's home page is the README (one text, on GitHub and on the site),
and console blocks tell a command's continuation lines from its output.

``docs/index.md`` holds a placeholder; its source is replaced by the README's, with the
README's links into ``docs/`` made relative to the site.
"""

from __future__ import annotations

import html as html_lib
import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parent.parent / "README.md"


def on_page_read_source(page: Any, config: Any) -> str | None:
    if page.file.src_uri != "index.md":
        return None
    return README.read_text().replace("](docs/", "](")


_CODE = re.compile(r"(<code>)(.*?)(</code>)", re.DOTALL)
_OUTPUT_LINE = '<span class="go">'
_PROMPT = '<span class="gp">'


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """In console blocks, the lines that continue a command (a quoted string or a
    here-document running on, a trailing backslash) are marked as the command's, not as
    its output: the console lexer takes every line without a prompt for output, and the
    site's stylesheet wraps commands but keeps output in columns."""
    return _CODE.sub(lambda m: m[1] + _continued_commands(m[2]) + m[3], html)


def _continued_commands(code: str) -> str:
    if _PROMPT not in code:
        return code
    lines = code.split("\n")
    state = _ShellState()
    for number, line in enumerate(lines):
        if line.startswith(_PROMPT):
            state = _ShellState()
            state.read(_text(line))
        elif state.open() and line.startswith(_OUTPUT_LINE):
            kind = "sh" if state.heredoc else "s2" if state.quote else "w"
            lines[number] = f'<span class="{kind}">' + line[len(_OUTPUT_LINE) :]
            state.read(_text(line))
    return "\n".join(lines)


def _text(line: str) -> str:
    return html_lib.unescape(re.sub(r"<[^>]+>", "", line))


class _ShellState:
    """What a shell still waits for after the lines read so far: a closing quote, the end
    of a here-document, or the line after a trailing backslash."""

    def __init__(self) -> None:
        self.quote = ""
        self.heredoc = ""
        self.backslash = False
        self._pending_heredoc = ""

    def open(self) -> bool:
        return bool(self.quote or self.heredoc or self.backslash)

    def read(self, line: str) -> None:
        if self.heredoc:
            if line.strip() == self.heredoc:
                self.heredoc = ""
            return
        self.backslash = False
        index = 0
        while index < len(line):
            char = line[index]
            if self.quote == "'":
                self.quote = "" if char == "'" else self.quote
            elif char == "\\" and index + 1 < len(line):
                index += 1  # an escaped character
            elif char == "\\":
                self.backslash = not self.quote
            elif self.quote == '"':
                self.quote = "" if char == '"' else self.quote
            elif char in "'\"":
                self.quote = char
            elif line.startswith("<<", index):
                found = re.match(r"<<-?\s*['\"]?(\w+)['\"]?", line[index:])
                if found:
                    self._pending_heredoc = found[1]
                    index += found.end() - 1
            index += 1
        if self._pending_heredoc and not self.quote:
            self.heredoc, self._pending_heredoc = self._pending_heredoc, ""

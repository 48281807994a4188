"""Run the documentation's console examples and check (or rewrite) what they print.

    python scripts/docs_examples.py            # run them; exit 1 where an output differs
    python scripts/docs_examples.py --write    # run them and write what they printed
    python scripts/docs_examples.py --page tier-whatif.md   # the tour, then that guide

The examples are the README's tour and every ``console`` block of every guide, in the
page's order. The tour runs first, in a fresh folder; each guide then runs all its blocks
in turn in a copy of that folder of its own ("after the tour, in the same folder", as
the guides say), where ``tests`` is the repository's (the guides' examples that read
``tests/data`` run from a clone), two guides at a time (those that start a local Ray
afterwards, alone).
A block that cannot run here (it needs a GPU, a live server, the network, a profiler's
binary) follows a line ``<!-- not run: REASON -->``; tests/test_docs.py lists those.
Each line that starts with ``$ `` is a command run by bash (with its continuation lines: a
trailing backslash, an open quote, a here-document), with this interpreter's ``kvtrace``
first on the PATH.  What a command prints is compared after `normalized`: the folder's
path, run ids' random suffixes and timings vary from run to run.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RAY = "--engine ray"  # a guide whose examples start a local Ray runs after the others
# a console block, and the reason it does not run when a "not run" comment precedes it
_BLOCK = re.compile(
    r"^(?:<!-- not run: (.+?) -->\n\n?)?```console\n(.*?)^```\n", re.MULTILINE | re.DOTALL
)
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
_RUN_ID_SUFFIX = re.compile(r"(?<=[A-Za-z0-9_])-[0-9a-f]{8}\b")
_SECONDS = re.compile(r"\b\d+(?:\.\d+)? s\b")
_TOKEN_RATE = re.compile(r"\(\d[\d,]*(?:\.\d+)? tokens/s\)")  # a collection's decode speed
_GENERATED = re.compile(r"Generated at \S+")


@dataclass
class Example:
    """One command of a console block and what the page says it prints."""

    page: Path
    command: str
    shown: str  # the output as the page shows it
    span: tuple[int, int]  # where that output sits in the page's text


def pages() -> list[Path]:
    """The README, then every guide in the order ``mkdocs.yml`` lists them."""
    nav = (ROOT / "mkdocs.yml").read_text()
    guides = re.findall(r"^\s+- [^:\n]+: (guides/[\w-]+\.md)$", nav, re.MULTILINE)
    return [ROOT / "README.md", *(ROOT / "docs" / guide for guide in guides)]


def examples(page: Path) -> list[Example]:
    """The console examples of ``page`` that run: the README's tour (the console blocks of
    its "Tour" section) or every console block of a guide but those marked not to run."""
    text = page.read_text()
    if page.name == "README.md":
        start = text.index("## Tour")
        end = text.find("\n## ", start + 3)
        end = len(text) if end == -1 else end
    else:
        start, end = 0, len(text)
    found = []
    for block in _BLOCK.finditer(text, start, end):
        if block[1] is not None:  # <!-- not run: ... -->
            continue
        offset = block.start(2)
        for command, output_start, output_end in commands(block[2]):
            found.append(
                Example(
                    page,
                    command,
                    block[2][output_start:output_end],
                    (offset + output_start, offset + output_end),
                )
            )
    return found


def not_run(page: Path) -> dict[str, str]:
    """The console blocks of ``page`` marked not to run: each block's first command, and
    why it does not run here."""
    text = page.read_text()
    return {
        next(commands(block[2]))[0]: block[1]
        for block in _BLOCK.finditer(text)
        if block[1] is not None
    }


def commands(block: str) -> Iterator[tuple[str, int, int]]:
    """Each command of a console block's text (``$ `` and its continuation lines), with
    where the output it shows starts and ends in the text (up to the next command)."""
    lines = block.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            i += 1
            continue
        first = i
        i = _command_end(lines, i)
        command = "".join(lines[first:i])[2:].rstrip("\n")
        output_start = starts[i]
        while i < len(lines) and not lines[i].startswith("$ "):
            i += 1
        yield command, output_start, starts[i]


def _command_end(lines: list[str], i: int) -> int:
    """The index of the line after the command starting at ``lines[i]``: its lines run on
    while one ends in a backslash, a quote is open, or a here-document is not closed."""
    shell_text, heredocs = "", []
    while i < len(lines):
        line = lines[i]
        i += 1
        if heredocs:
            if line.strip() == heredocs[0]:
                heredocs.pop(0)
        else:
            shell_text += line[2:] if not shell_text else line
            heredocs += [word for _, word in _HEREDOC.findall(line)]
        if heredocs or shell_text.endswith("\\\n") or not _quotes_closed(shell_text):
            continue
        return i
    return i


def _quotes_closed(text: str) -> bool:
    try:
        shlex.split(text)
    except ValueError:  # No closing quotation
        return False
    return True


def normalized(text: str, folder: Path) -> str:
    """``text`` without what varies between runs: the folder's path, the random end of
    run ids, seconds taken and tokens decoded per second, the time a report was
    generated."""
    text = text.replace(f"{folder}/", "").replace(str(folder), ".")
    text = _RUN_ID_SUFFIX.sub("-xxxxxxxx", text)
    text = _SECONDS.sub("N s", text)
    text = _TOKEN_RATE.sub("(N tokens/s)", text)
    return _GENERATED.sub("Generated at T", text)


class ExampleFailed(Exception):
    """A command of an example exited with an error."""


def run(example: Example, folder: Path) -> str:
    """What ``example``'s command prints in ``folder`` (stdout and stderr together)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVTRACE_WAREHOUSE")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        ["bash", "-c", example.command],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise ExampleFailed(f"{example.page.name}: `{example.command}` failed:\n{done.stdout}")
    return done.stdout


def differences(
    folder: Path, write: bool = False, at_once: int = 2, only: set[str] | None = None
) -> list[str]:
    """Run every example under ``folder`` (the tour in ``folder/tour``, each guide in a
    copy of it; ``at_once`` guides at a time; with ``only``, the guides so named); the
    ones whose output differs from the page's, and the commands that failed (each as a
    short report), or, with ``write``, rewrite the pages with what ran."""
    readme, *guides = [page for page in pages() if examples(page)]
    if only is not None:
        guides = [page for page in guides if page.name in only]
    tour = folder / "tour"
    tour.mkdir()
    found = _page_differences(readme, tour, write)

    def guide_differences(page: Path) -> list[str]:
        own = folder / page.stem
        shutil.copytree(tour, own, symlinks=True)
        (own / "tests").symlink_to(ROOT / "tests", target_is_directory=True)  # a clone's
        return _page_differences(page, own, write)

    alone = [page for page in guides if any(RAY in e.command for e in examples(page))]
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        for reports in pool.map(guide_differences, [p for p in guides if p not in alone]):
            found += reports
    for page in alone:  # a local Ray starting beside other work may time out
        found += guide_differences(page)
    return found


def _page_differences(page: Path, folder: Path, write: bool) -> list[str]:
    """Run ``page``'s examples in turn in ``folder`` (up to the first that fails: the
    later ones start from what it left); see `differences`."""
    found, outputs = [], []
    for example in examples(page):
        try:
            printed = run(example, folder)
        except ExampleFailed as failed:
            return [*found, str(failed).replace(str(folder), ".")]
        if normalized(printed, folder) != normalized(example.shown, folder):
            outputs.append((example, printed))  # only those that differ are rewritten
            found.append(
                f"{page.relative_to(ROOT)}: `{example.command}` printed\n"
                f"{normalized(printed, folder)}instead of\n{normalized(example.shown, folder)}"
            )
    if write and outputs:
        text = page.read_text()
        for example, printed in reversed(outputs):  # later spans first: offsets hold
            start, end = example.span
            shown = printed.replace(f"{folder}/", "").replace(str(folder), ".")
            text = text[:start] + shown + text[end:]
        page.write_text(text)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the pages' outputs")
    parser.add_argument(
        "--page", action="append", help="run this guide only (after the tour); repeatable"
    )
    args = parser.parse_args()
    only = set(args.page) if args.page else None
    with tempfile.TemporaryDirectory(prefix="kvtrace-docs-") as folder:
        found = differences(Path(folder).resolve(), write=args.write, only=only)
    if found:
        print("\n\n".join(found))
        sys.exit(1)


if __name__ == "__main__":
    main()

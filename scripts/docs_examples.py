"""Run the documentation's console examples and check (or rewrite) what they print.

    python scripts/docs_examples.py            # run them; exit 1 where an output differs
    python scripts/docs_examples.py --write    # run them and write what they printed

The examples are the README's tour and the "Try it" section that opens each guide. The
tour runs first, in a fresh folder; each guide then runs in a copy of that folder of its
own ("after the tour, in the same folder", as the guides say), two guides at a time
(those that start a local Ray afterwards, alone).
Each line that starts with ``$ `` is a command run by bash, with this interpreter's
``kvtrace`` first on the PATH.  What a command prints is compared after `normalized`: the
folder's path, run ids' random suffixes and timings vary from run to run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRY_IT = "## Try it"
RAY = "--engine ray"  # a guide whose examples start a local Ray runs after the others
_BLOCK = re.compile(r"^```console\n(.*?)^```\n", re.MULTILINE | re.DOTALL)
_RUN_ID_SUFFIX = re.compile(r"(?<=[A-Za-z0-9_])-[0-9a-f]{8}\b")
_SECONDS = re.compile(r"\b\d+(?:\.\d+)? s\b")
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
    """The console examples of ``page`` that run: the README's tour (its first console
    block) or a guide's "Try it" section."""
    text = page.read_text()
    if page.name == "README.md":
        start = text.index("## Tour")
    elif TRY_IT in text:
        start = text.index(TRY_IT)
    else:
        return []
    end = text.find("\n## ", start + 3)
    end = len(text) if end == -1 else end
    found = []
    for block in _BLOCK.finditer(text, start, end):
        offset = block.start(1)
        for command in re.finditer(r"^\$ (.*)\n((?:(?!\$ ).*\n)*)", block[1], re.MULTILINE):
            found.append(
                Example(
                    page,
                    command[1],
                    command[2],
                    (offset + command.start(2), offset + command.end(2)),
                )
            )
    return found


def normalized(text: str, folder: Path) -> str:
    """``text`` without what varies between runs: the folder's path, the random end of
    run ids, seconds taken, the time a report was generated."""
    text = text.replace(f"{folder}/", "").replace(str(folder), ".")
    text = _RUN_ID_SUFFIX.sub("-xxxxxxxx", text)
    text = _SECONDS.sub("N s", text)
    return _GENERATED.sub("Generated at T", text)


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
        raise RuntimeError(f"{example.page.name}: `{example.command}` failed:\n{done.stdout}")
    return done.stdout


def differences(folder: Path, write: bool = False, at_once: int = 2) -> list[str]:
    """Run every example under ``folder`` (the tour in ``folder/tour``, each guide in a
    copy of it; ``at_once`` guides at a time); the ones whose output differs from the
    page's (each as a short report), or, with ``write``, rewrite the pages with what ran."""
    readme, *guides = [page for page in pages() if examples(page)]
    tour = folder / "tour"
    tour.mkdir()
    found = _page_differences(readme, tour, write)

    def guide_differences(page: Path) -> list[str]:
        own = folder / page.stem
        shutil.copytree(tour, own, symlinks=True)
        return _page_differences(page, own, write)

    alone = [page for page in guides if any(RAY in e.command for e in examples(page))]
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        for reports in pool.map(guide_differences, [p for p in guides if p not in alone]):
            found += reports
    for page in alone:  # a local Ray starting beside other work may time out
        found += guide_differences(page)
    return found


def _page_differences(page: Path, folder: Path, write: bool) -> list[str]:
    """Run ``page``'s examples in turn in ``folder``; see `differences`."""
    found, outputs = [], []
    for example in examples(page):
        printed = run(example, folder)
        outputs.append((example, printed))
        if normalized(printed, folder) != normalized(example.shown, folder):
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvtrace-docs-") as folder:
        found = differences(Path(folder).resolve(), write=args.write)
    if found and not args.write:
        print("\n\n".join(found))
        sys.exit(1)


if __name__ == "__main__":
    main()

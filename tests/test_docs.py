"""The documentation: its examples print what they show, its reference is the code's, and
the site builds with no warning."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_reference_pages_are_those_the_code_gives():
    reference = _script("docs_reference")
    for path, text in reference.pages().items():
        assert path.read_text() == text, (
            f"{path.name} is out of date: python scripts/docs_reference.py"
        )


def test_the_readme_tour_and_every_guides_first_example_print_what_they_show(tmp_path):
    examples = _script("docs_examples")
    pages = examples.pages()
    guides = sorted((ROOT / "docs" / "guides").glob("*.md"))
    assert len(pages) == 1 + len(guides)  # the README and every guide
    tried = {page.name for page in pages if examples.examples(page)}
    # every guide but performance, which runs from a clone, and instrument, whose lines
    # run in an engine (tests/collectors/test_instrument_guide.py runs them)
    assert tried == {"README.md"} | {g.name for g in guides} - {"performance.md", "instrument.md"}
    assert examples.differences(tmp_path.resolve()) == []


def test_the_checks_see_a_changed_output(tmp_path):
    examples = _script("docs_examples")
    page = tmp_path / "README.md"
    page.write_text("## Tour\n\n```console\n$ echo one\ntwo\n```\n")
    (shown,) = examples.examples(page)
    assert examples.run(shown, tmp_path) == "one\n" != shown.shown
    assert examples.normalized("run x-0123abcd took 1.5 s", tmp_path) == "run x-xxxxxxxx took N s"


def test_the_site_builds_strictly(tmp_path):
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("the docs extra is not installed (pip install -e '.[docs]')")
    built = subprocess.run(
        [Path(sys.executable).parent / "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)},
    )
    assert built.returncode == 0, built.stderr
    home = (tmp_path / "site" / "index.html").read_text()
    assert "Tour" in home and 'href="guides/workload/"' in home  # the README, links mended

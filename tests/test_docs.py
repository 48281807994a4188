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


# The console blocks that do not run here, each as its first command and the reason its
# "<!-- not run: ... -->" line gives; a block marked so must be added here.
NOT_RUN = {
    "dsa-traces.md": {
        "kvtrace ingest outputs/ruler_1771772829/": "reads a tracer's output folder of your own",
        'kvtrace sql "SELECT layer_id, steps, groups, round(group_density, 3) AS group_density, '
        "round(union_density, 3) AS union_density, round(full_union_share, 3) AS full_union, "
        "round(io_saved, 3) AS io_saved, round(compute_saved, 3) AS compute_saved "
        'FROM dsa_group_savings(16)"': (
            "reads a per-group trace of a GQA model (tests/collectors build one)"
        ),
    },
    "fleets.md": {
        "git clone --depth 1 https://github.com/microsoft/vidur": (
            "needs the network (it clones Vidur's repository)"
        ),
    },
    "timelines.md": {
        "nsys profile --trace=cuda,nvtx -o rank0 python serve.py": "needs a GPU and NVIDIA's nsys",
    },
}


def test_the_readme_tour_and_every_guide_example_print_what_they_show(tmp_path):
    examples = _script("docs_examples")
    pages = examples.pages()
    guides = sorted((ROOT / "docs" / "guides").glob("*.md"))
    assert len(pages) == 1 + len(guides)  # the README and every guide
    tried = {page.name for page in pages if examples.examples(page)}
    # every guide but performance, which runs from a clone, and instrument, whose lines
    # run in an engine (tests/collectors/test_instrument_guide.py runs them)
    assert tried == {"README.md"} | {g.name for g in guides} - {"performance.md", "instrument.md"}
    assert {p.name: examples.not_run(p) for p in pages if examples.not_run(p)} == NOT_RUN
    assert examples.differences(tmp_path.resolve()) == []


def test_the_checks_see_a_changed_output(tmp_path):
    examples = _script("docs_examples")
    page = tmp_path / "README.md"
    page.write_text("## Tour\n\n```console\n$ echo one\ntwo\n```\n")
    (shown,) = examples.examples(page)
    assert examples.run(shown, tmp_path) == "one\n" != shown.shown
    assert examples.normalized("run x-0123abcd took 1.5 s", tmp_path) == "run x-xxxxxxxx took N s"
    assert (
        examples.normalized("96 tokens in 139.0 s (0.7 tokens/s) into run r-3f424aa5", tmp_path)
        == "96 tokens in N s (N tokens/s) into run r-xxxxxxxx"
    )


def test_every_console_block_of_a_guide_is_read_with_its_continuation_lines(tmp_path):
    examples = _script("docs_examples")
    page = tmp_path / "guide.md"
    page.write_text(
        "## Try it\n\n```console\n$ echo one\none\n```\n\n## In depth\n\n"
        "```console\n$ cat > a.txt <<'END'\n$ not a command\nEND\n"
        "$ echo 'two\n  lines' \\\n  three\ntwo\n  lines three\n```\n\n"
        "<!-- not run: needs a GPU -->\n\n```console\n$ nvidia-smi\nGPU 0\n```\n"
    )
    found = examples.examples(page)
    assert [(e.command, e.shown) for e in found] == [
        ("echo one", "one\n"),
        ("cat > a.txt <<'END'\n$ not a command\nEND", ""),
        ("echo 'two\n  lines' \\\n  three", "two\n  lines three\n"),
    ]
    assert [examples.run(e, tmp_path) for e in found] == [e.shown for e in found]
    assert (tmp_path / "a.txt").read_text() == "$ not a command\n"
    assert examples.not_run(page) == {"nvidia-smi": "needs a GPU"}
    text = page.read_text()
    assert [text[slice(*e.span)] for e in found] == [e.shown for e in found]


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

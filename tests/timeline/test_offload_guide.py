"""The timelines guide's "Offload counters on the profiler's clock" Try it prints what it
shows (the guides' first Try it sections run in tests/test_docs.py; this one is further
down its page)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "timelines.md"
SECTION = "## Offload counters on the profiler's clock"


def _docs_examples():
    spec = importlib.util.spec_from_file_location(
        "docs_examples", ROOT / "scripts" / "docs_examples.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_examples"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_offload_try_it_prints_what_it_shows(tmp_path):
    examples = _docs_examples()
    text = GUIDE.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + 3)
    (block,) = re.findall(r"^```console\n(.*?)^```\n", text[start : end if end != -1 else None],
                          re.MULTILINE | re.DOTALL)  # fmt: skip
    commands = re.findall(r"^\$ (.*)\n((?:(?!\$ ).*\n)*)", block, re.MULTILINE)
    assert len(commands) == 6
    shutil.copytree(ROOT / "tests" / "data" / "offload", tmp_path / "tests" / "data" / "offload")
    for command, shown in commands:
        example = examples.Example(GUIDE, command, shown, (0, 0))
        printed = examples.run(example, tmp_path)
        assert examples.normalized(printed, tmp_path) == examples.normalized(shown, tmp_path)

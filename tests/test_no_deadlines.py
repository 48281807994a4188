"""No test depends on the machine's speed: generated examples have no deadline (the first
may load a compiled kernel from numba's cache, or compile it, on a loaded machine), set
once for every test by tests/conftest.py's hypothesis profile, and no test sets one."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import settings

TESTS = Path(__file__).resolve().parent
# a hypothesis settings call (a decorator, a profile) whose deadline is not None
_DEADLINE = re.compile(r"\b(?:settings|register_profile)\([^)]*?\bdeadline\s*=\s*(?!None\b)")


def _deadlines_set(text: str) -> list[str]:
    """The settings calls of a test module that give hypothesis a deadline other than None."""
    return [" ".join(m[0].split()) for m in _DEADLINE.finditer(text)]


def test_the_suites_profile_has_no_deadline():
    assert settings.default.deadline is None
    assert settings.default.derandomize  # a failure is reproduced by running it again


def test_no_test_module_sets_a_deadline():
    found = {
        path.relative_to(TESTS).as_posix(): lines
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != Path(__file__).name and (lines := _deadlines_set(path.read_text()))
    }
    assert found == {}


def test_a_deadline_is_found():
    module = (
        "@settings(max_examples=5, deadline=200)\n@settings(deadline=None)\n"
        "@settings(\n    max_examples=5,\n    deadline=timedelta(seconds=1),\n)\n"
        "deadline = time.monotonic() + 60  # a test's own wait, not hypothesis's\n"
    )
    assert _deadlines_set(module) == [
        "settings(max_examples=5, deadline=",
        "settings( max_examples=5, deadline=",
    ]

"""Prompt datasets offered to ``kvtrace ingest``: what they are and which command reads them.

A prompt dataset is not a trace: ``kvtrace collect dsa --dataset NAME --data-file FILE``
sends its prompts through a model and traces that.  When ``ingest`` meets one, the
sentence it prints says so instead of listing the traces kvtrace reads.  The signatures
are those the collectors' loaders check (`kvtrace.collectors.datasets`):

- ShareGPT: a JSON list of ``{id, conversations: [{from, value}]}``;
- LongBench v2: a JSON list of ``{_id, ..., question, choice_A..choice_D, answer, context}``;
- RULER: JSONL records ``{index, input, outputs, length}`` (a prediction file, which
  ``ingest`` reads, adds ``pred``), or a ``.tgz`` of such files.

BurstGPT's CSV is both a ``collect dsa`` dataset and an arrival trace ``ingest`` reads,
so it never reaches this module.

Only the first `kvtrace.ingest.probe.HEAD_BYTES` are looked at: a list's first record
is parsed when it fits there, else its keys are found by name.
"""

from __future__ import annotations

import json
import re

from kvtrace.ingest.probe import Probe

TAR_MAGIC_OFFSET = 257  # a POSIX tar header holds b"ustar" here
LONGBENCH_KEYS = frozenset({"question", "choice_A", "choice_B", "choice_C", "choice_D"})
_KEY = re.compile(rb'"([A-Za-z_][A-Za-z0-9_]*)"\s*:')


def dataset_sentence(probe: Probe) -> str | None:
    """What ``probe``'s file is and the command that reads it, when it is a prompt
    dataset of ``kvtrace collect dsa``; None for any other file."""
    dataset = _dataset_of(probe)
    if dataset is None:
        return None
    name, what = dataset
    return (
        f"{probe.path} is {what}, a prompt dataset rather than a trace: "
        f"'kvtrace collect dsa --dataset {name} --data-file {probe.path}' runs its prompts "
        "through a model and traces them"
    )


def _dataset_of(probe: Probe) -> tuple[str, str] | None:
    """The ``--dataset`` name and a description of ``probe``'s file, or None."""
    if _is_tar_of_jsonl(probe.head):
        return "ruler", "a tar archive of JSONL files (as RULER's prepared data comes)"
    if probe.is_json_list:
        keys = _first_element_keys(probe.head)
        if "conversations" in keys:
            return "sharegpt", "a ShareGPT file (conversations of from/value turns)"
        if keys >= LONGBENCH_KEYS:
            return "longbench-v2", "LongBench v2 data (questions with choices A to D)"
        return None
    record = probe.first_record or {}
    # with a prediction (pred) beside them, input and outputs make a RULER prediction file
    if isinstance(record.get("input"), str) and "outputs" in record and "pred" not in record:
        return "ruler", "RULER data (records of input and outputs, without predictions)"
    return None


def _first_element_keys(head: bytes) -> set[str]:
    """The keys of the first object of a JSON list starting ``head``: parsed when it is
    whole there, else every key name in ``head``."""
    start = head.lstrip()[1:].lstrip()
    try:
        first, _ = json.JSONDecoder().raw_decode(start.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):  # cut by the head's end
        return {key.decode() for key in _KEY.findall(head)}
    return set(first) if isinstance(first, dict) else set()


def _is_tar_of_jsonl(head: bytes) -> bool:
    """Whether ``head`` starts a tar archive with a JSONL file among its first members
    (a member's header holds its name, NUL-padded)."""
    is_tar = head[TAR_MAGIC_OFFSET : TAR_MAGIC_OFFSET + 5] == b"ustar"
    return is_tar and b".jsonl\0" in head


__all__ = ["dataset_sentence"]

"""RULER's needle-in-a-haystack task, generated offline.

Follows RULER's recipe: a "noise" haystack ("The grass is green. The sky is blue. ..."
repeated), needles "One of the special magic numbers for {key} is: {value}." placed at
evenly spread depths, and the question at the end.  ``single`` hides one needle;
``multikey`` adds needles for other keys as distractors.  The haystack is grown until
the prompt reaches the target length in tokens of the given tokenizer.

RULER's own prepared data is read too: its ``.jsonl`` files (records ``{index, input,
outputs, length}``), or a ``.tgz`` of them, whose tasks are named by their folders.
"""

from __future__ import annotations

import io
import json
import random
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Literal

from kvtrace.collectors.datasets import DatasetRequest, read_local_file
from kvtrace.errors import InputError

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE = "One of the special magic numbers for {key} is: {value}."
TEMPLATE = (
    "Some special magic numbers are hidden within the following text. Make sure to "
    "memorize it. I will quiz you about the numbers afterwards.\n{context}\n"
    "What are all the special magic numbers for {key} mentioned in the provided text? "
    "The special magic numbers for {key} mentioned in the provided text are"
)
_WORDS = (
    "amber",
    "basil",
    "cobalt",
    "delta",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lumen",
    "marlin",
    "nectar",
    "onyx",
    "pylon",
    "quartz",
    "raven",
    "saffron",
    "tundra",
    "umber",
    "violet",
    "willow",
    "xenon",
    "yarrow",
    "zephyr",
)


def _key(rng: random.Random) -> str:
    return f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}"


def niah_requests(
    count: int,
    target_tokens: int,
    count_tokens: Callable[[str], int],
    *,
    variant: Literal["single", "multikey"] = "single",
    distractors: int = 3,
    seed: int = 0,
) -> Iterator[DatasetRequest]:
    """``count`` NIAH prompts of about ``target_tokens`` tokens each."""
    rng = random.Random(seed)
    for request_id in range(count):
        key = _key(rng)
        value = str(rng.randint(1_000_000, 9_999_999))
        needles = [NEEDLE.format(key=key, value=value)]
        needles_by_key = {key: needles[0]}
        if variant == "multikey":
            others = {_key(rng) for _ in range(distractors)} - {key}
            needles += [
                NEEDLE.format(key=k, value=rng.randint(1_000_000, 9_999_999))
                for k in sorted(others)
            ]
            rng.shuffle(needles)
        sentences = _fill(needles, target_tokens, count_tokens, key)
        yield DatasetRequest(
            request_id,
            TEMPLATE.format(context=" ".join(sentences), key=key),
            answer=value,
            meta={
                "task": f"niah_{variant}",
                "key": key,
                "needles": len(needles),
                "needle": needles_by_key[key],
            },
            references=[value],
            task=f"niah_{variant}",
        )


def _fill(
    needles: list[str], target: int, count_tokens: Callable[[str], int], key: str
) -> list[str]:
    """Noise sentences with the needles at evenly spread depths, grown to ``target``."""

    def build(repeats: int) -> list[str]:
        haystack = [NOISE] * repeats
        for i, needle in enumerate(needles):
            depth = round((i + 1) / (len(needles) + 1) * len(haystack))
            haystack.insert(depth + i, needle)
        return haystack

    low, high = 1, 1
    while count_tokens(TEMPLATE.format(context=" ".join(build(high)), key=key)) < target:
        low, high = high, high * 2
    while low < high:  # the most repeats that stay within the target
        middle = (low + high + 1) // 2
        size = count_tokens(TEMPLATE.format(context=" ".join(build(middle)), key=key))
        low, high = (middle, high) if size <= target else (low, middle - 1)
    return build(low)


def load_ruler_file(path: Path) -> tuple[list[dict], str]:
    """The records of a RULER ``.jsonl`` file or ``.tgz`` of them, and the file's sha256.

    Each record gets a ``task``: the file's stem, or in an archive its folder's name
    (``niah_single_1/validation.jsonl``).  Archive members are read in name order.
    """
    data, sha = read_local_file(path)
    if path.name.endswith((".tgz", ".tar.gz")):
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
                members = sorted(
                    (m for m in archive.getmembers() if m.isfile() and m.name.endswith(".jsonl")),
                    key=lambda m: m.name,
                )
                files = [(m.name, _member_bytes(archive, m)) for m in members]
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise InputError(f"cannot read {path} as a .tgz of RULER files: {exc}") from None
        if not files:
            raise InputError(f"{path} holds no .jsonl files")
    else:
        files = [(path.name, data)]
    records = []
    for name, content in files:
        member = PurePosixPath(name)
        task = member.parent.name if len(member.parts) > 1 else member.stem
        records += [
            {**record, "task": record.get("task", task)}
            for record in _jsonl_records(content, f"{path}:{name}")
        ]
    return check_ruler(records, str(path)), sha


def _jsonl_records(content: bytes, source: str) -> list[dict]:
    records = []
    for line_no, line in enumerate(content.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            raise InputError(f"{source} line {line_no} is not valid JSON") from None
    return records


def check_ruler(records: object, source: str) -> list[dict]:
    """``records`` if they are RULER records (with ``input``), else one clear error."""
    if not isinstance(records, list) or not all(
        isinstance(r, dict) and isinstance(r.get("input"), str) for r in records
    ):
        raise InputError(
            f"{source} is not RULER data: expected records with an input text (and outputs)"
        )
    return records


def ruler_requests(records: list[dict]) -> Iterator[DatasetRequest]:
    """One request per prepared RULER record; its answer is the expected outputs."""
    for request_id, record in enumerate(records):
        outputs = record.get("outputs") or []
        yield DatasetRequest(
            request_id,
            record["input"],
            answer=", ".join(map(str, outputs)),
            meta={
                "task": record.get("task"),
                "index": record.get("index"),
                "length": record.get("length"),
            },
            references=[str(o) for o in outputs],
            task=str(record.get("task") or "ruler"),
        )


def _member_bytes(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    handle = archive.extractfile(member)
    if handle is None:
        raise InputError(f"{member.name} in the archive is not a regular file")
    return handle.read()

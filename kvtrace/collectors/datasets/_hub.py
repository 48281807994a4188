"""Datasets through the ``datasets`` library: a hub id (online) or a local folder."""

from __future__ import annotations

from kvtrace.errors import InputError


def load_hub_records(
    name: str, *, split: str, revision: str | None = None
) -> tuple[list[dict], str]:
    """The records of ``name`` (a hub id like ``zai-org/LongBench-v2``, or a folder that
    ``datasets.load_dataset`` reads) and the exact variant to record in ``runs``."""
    try:
        from datasets import load_dataset
    except ImportError:
        raise InputError(
            "--hf-dataset needs the datasets package (pip install 'kvtrace[collect]')"
        ) from None
    try:
        data = load_dataset(name, split=split, revision=revision)
    except Exception as exc:  # network, missing dataset or split: many exception types
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"cannot load dataset {name!r} (split {split}): {first_line}") from None
    variant = (
        f"{name} (split {split}, revision {revision or 'default'}, fingerprint {data._fingerprint})"
    )
    return data.to_list(), variant

"""The rows every writer of runs keeps: run ids, ``runs`` rows and quarantine rows.

Ingest and the collectors both use these, so a collected run and an ingested one are
recorded the same way and neither imports the other.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from datetime import datetime, timezone
from typing import Any

from kvtrace._version import __version__
from kvtrace.warehouse.rows.rejects import BadLine

__all__ = ["collection_run_id", "make_run_id", "quarantine_rows", "run_row"]


def make_run_id(run_name: str, source: str) -> str:
    """A stable run id: a readable slug of the name plus a hash of (name, source)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_name).strip("-.")[:48] or "run"
    digest = hashlib.sha1(f"{run_name}\0{source}".encode()).hexdigest()[:8]
    return f"{slug}-{digest}"


def collection_run_id(run_name: str) -> str:
    """The id of a new collection: a run of its own however often the name was used
    before (collecting twice under one name never mixes two collections' records)."""
    started = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}-{os.urandom(4).hex()}"
    return make_run_id(run_name, f"collect {started}")


def run_row(
    run_id: str,
    run_name: str,
    kind: str,
    *,
    source: str,
    collector_config: dict[str, Any],
    dataset: str | None = None,
    dataset_variant: str | None = None,
    model: str | None = None,
    model_config: dict[str, Any] | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    started_at: datetime | None = None,
) -> dict[str, Any]:
    """The ``runs`` row of a run (``source``: collect or ingest)."""
    return {
        "run_id": run_id,
        "run_name": run_name,
        "kind": kind,
        "dataset": dataset,
        "dataset_variant": dataset_variant,
        "model": model,
        "model_config": json.dumps(model_config, sort_keys=True) if model_config else None,
        "collector_config": json.dumps(collector_config, sort_keys=True),
        "rank": rank,
        "world_size": world_size,
        "source": source,
        "host": socket.gethostname(),
        "started_at": started_at,
        "kvtrace_version": __version__,
    }


def quarantine_rows(
    run_id: str, source_path: str, source_sha256: str | None, rejected: list[BadLine]
) -> list[dict[str, Any]]:
    """The ``quarantine`` rows of rejected lines (or records, for a live trace)."""
    return [
        {
            "run_id": run_id,
            "source_path": source_path,
            "source_sha256": source_sha256,
            "line_no": bad.line_no,
            "reason": bad.reason,
            "raw": bad.raw,
        }
        for bad in rejected
    ]

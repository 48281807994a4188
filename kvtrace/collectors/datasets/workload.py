"""Replay an ingested workload trace through the DSA collector (``--workload RUN``).

The run's requests (``workload_requests``) arrive at their recorded times with their
prompt and output lengths.  For traces with prefix-block hashes (Mooncake), each prompt
is built block by block: every hash id becomes a block of ``hash_block_tokens`` bytes of
text derived from the id alone, so requests that share leading hash ids share their
prompt's leading tokens (byte tokenizer: one byte, one token), and the collector's prefix
analysis sees the same hits the trace recorded.  The last block is cut to the request's
prompt length.  Read through the warehouse layer's files; no SQL connection needed.
"""

from __future__ import annotations

import hashlib

import pyarrow.compute as pc

from kvtrace.collectors.datasets.burstgpt import Arrival, filler_prompt
from kvtrace.errors import InputError
from kvtrace.warehouse import Warehouse
from kvtrace.warehouse.rows.bookkeeping import make_run_id

_WORDS = (
    "cache",
    "block",
    "token",
    "prefix",
    "layer",
    "query",
    "value",
    "index",
    "river",
    "stone",
    "cloud",
    "green",
    "north",
    "light",
    "paper",
    "sound",
)


def workload_arrivals(warehouse: Warehouse, run: str, limit: int) -> tuple[list[Arrival], str]:
    """The first ``limit`` requests of the workload run named ``run`` (name or id)."""
    run_id = _run_id(warehouse, run)
    files = warehouse.run_files(run_id, "workload_requests")
    table = warehouse.read_files(files).filter(pc.equal(pc.field("run_id"), run_id))
    table = table.sort_by("request_idx").slice(0, limit)
    arrivals = []
    for i, row in enumerate(table.to_pylist()):
        prompt = (
            block_prompt(row["hash_ids"], row["hash_block_tokens"] or 512, row["input_tokens"])
            if row["hash_ids"]
            else None
        )
        arrivals.append(
            Arrival(i, row["arrival_s"], row["input_tokens"], row["output_tokens"], prompt)
        )
    return arrivals, f"workload run {run_id} (first {len(arrivals)} requests)"


def block_prompt(hash_ids: list[int], block_tokens: int, prompt_tokens: int) -> str:
    """A prompt of ``prompt_tokens - 1`` bytes whose blocks are determined by the ids."""
    text = "".join(_block_text(h, block_tokens) for h in hash_ids)
    size = max(prompt_tokens - 1, 1)
    return (text + filler_prompt(size + 1))[:size] if len(text) < size else text[:size]


def _block_text(hash_id: int, size: int) -> str:
    """``size`` bytes of words chosen by a hash of ``hash_id``."""
    words, counter = [], 0
    length = 0
    while length < size:
        digest = hashlib.sha256(f"{hash_id}:{counter}".encode()).digest()
        for byte in digest:
            word = _WORDS[byte % len(_WORDS)] + " "
            words.append(word)
            length += len(word)
        counter += 1
    return "".join(words)[:size]


def _run_id(warehouse: Warehouse, run: str) -> str:
    """The id of an ingested workload run given by id or by name."""
    runs = {
        commit["run_id"]
        for commit in warehouse.snapshot().commits.to_pylist()
        if any(entry["table"] == "workload_requests" for entry in commit["tables"])
    }
    for candidate in (run, make_run_id(run, "ingest")):
        if candidate in runs:
            return candidate
    raise InputError(
        f"the warehouse holds no workload run {run!r}; ingest an arrival "
        "trace first (kvtrace ingest TRACE)"
    )

"""Which epoch of an engine a KV-event batch belongs to, and whether it came before.

An engine numbers its batches from 0 each time it starts (vLLM, SGLang), so one
collection, or one recorded file, may hold several engines' batches under the same
numbers.  The rule, the same for the collector and for recorded files: a batch numbered
above the last one continues the epoch; a batch numbered at or below it is a repeat when
its bytes are those of the batch received under that number (one of the epoch's last
`REPEAT_WINDOW`), and otherwise the first batch of a new epoch: the engine restarted.
Two engines' batches are never alike byte for byte: each carries its time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

__all__ = ["REPEAT_WINDOW", "Arrival", "EngineEpochs", "restart_row"]

REPEAT_WINDOW = 10_000  # the batches of an epoch a repeat is recognised among (vLLM replays 10,000)


@dataclass(frozen=True)
class Arrival:
    """Where a batch stands: its epoch, whether it is a repeat, and, for the first batch
    of a new epoch, the last sequence number of the epoch before."""

    epoch: int
    repeat: bool = False
    went_back_from: int | None = None


@dataclass
class EngineEpochs:
    """One engine's epoch, the last sequence number in it, and the digests of its
    last `REPEAT_WINDOW` batches by sequence number."""

    epoch: int = 0
    last_seq: int | None = None
    _digests: dict[int, bytes] = field(default_factory=dict)

    def arrive(self, seq: int, content: bytes) -> Arrival:
        """Place the batch ``seq`` whose bytes are ``content``; a new epoch begins here
        when the numbers went back and it is no repeat."""
        if self.last_seq is None or seq > self.last_seq:
            return Arrival(self.epoch)
        if self._digests.get(seq) == _digest(content):
            return Arrival(self.epoch, repeat=True)
        went_back_from = self.last_seq
        self.epoch += 1
        self.last_seq = None
        self._digests.clear()
        return Arrival(self.epoch, went_back_from=went_back_from)

    def taken(self, seq: int, content: bytes) -> None:
        """Record that the batch ``seq`` of the current epoch was read."""
        self._digests[seq] = _digest(content)
        if len(self._digests) > REPEAT_WINDOW:
            del self._digests[next(iter(self._digests))]  # the oldest
        if self.last_seq is None or seq > self.last_seq:
            self.last_seq = seq


def restart_row(worker: str, arrival: Arrival, seq: int) -> dict[str, object]:
    """The ``restart`` row of kv_events that marks where a new epoch began."""
    return {
        "worker": worker,
        "epoch": arrival.epoch,
        "seq": seq,
        "kind": "restart",
        "detail": f"sequence numbers went back from {arrival.went_back_from} to {seq}: "
        "the engine restarted",
    }


def _digest(content: bytes) -> bytes:
    return hashlib.blake2b(content, digest_size=16).digest()

"""The largest KV-event message the collector reads (``kvtrace collect kv-events
--max-message-mb`` and ``--max-message-blocks``); a larger one is an ``error`` row.

The bytes bound is checked before decoding and bounds what decoding can build; the block
events bound is checked before any row is made (each is a row in memory until its
commit).  vLLM publishes one message per scheduler step, a few MB at the most even with
its token ids, and far fewer blocks than 200,000 (a step's new tokens over the block
size).  Importable without Arrow, for the command line's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_MESSAGE_MB = 16  # a message's payload, in MiB
MAX_MESSAGE_BLOCKS = 200_000  # block events (rows) of one message: one commit's worth


@dataclass(frozen=True)
class MessageBounds:
    """The largest message read: payload bytes, and the block events it holds."""

    bytes: int = MAX_MESSAGE_MB * 2**20
    blocks: int = MAX_MESSAGE_BLOCKS


DEFAULT_BOUNDS = MessageBounds()

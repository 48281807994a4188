"""A loopback KV-event publisher that speaks vLLM's wire format.

The structs are vLLM's (``vllm/distributed/kv_events.py``): ``array_like`` as releases
that publish arrays send them (a batch ``[ts, events, rank]``, an event
``["BlockStored", ...]``), or maps as later releases do (``{"type": "BlockStored", ...}``,
byte hashes).  Messages are ``(topic, 8-byte big-endian seq, msgpack payload)`` on a PUB
socket; a ROUTER socket answers ``(b"", start seq)`` with every buffered ``(seq, payload)``
from there and an end marker ``(-1, b"")``, as vLLM's ``ZmqEventPublisher`` does.  The
PUB side is an XPUB, so a test can wait until the collector has subscribed instead of
sleeping.
"""

from __future__ import annotations

import threading
from typing import Any

import msgspec
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class ArrayBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class ArrayEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    """Base of the array-like events."""


class BlockStored(ArrayEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class BlockRemoved(ArrayEvent):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(ArrayEvent):
    pass


class MapBatch(msgspec.Struct, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class MapEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """Base of the map events."""


class MapBlockStored(MapEvent, tag="BlockStored"):
    block_hashes: list[bytes]
    parent_block_hash: bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None


class MapBlockRemoved(MapEvent, tag="BlockRemoved"):
    block_hashes: list[bytes]
    medium: str | None
    group_idx: int | None = None


class Publisher:
    """vLLM's publisher on loopback ports, with a replay buffer and a way to drop
    messages (published to the buffer, never sent)."""

    def __init__(self, topic: str = "kv-events") -> None:
        self.context = zmq.Context()
        self.pub = self.context.socket(zmq.XPUB)
        self.port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.router = self.context.socket(zmq.ROUTER)
        self.replay_port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.topic = topic.encode()
        self.seq = 0
        self.buffer: list[tuple[int, bytes]] = []
        self.encoder = msgspec.msgpack.Encoder()
        self.replaying = True
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve_replays, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    @property
    def replay_endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.replay_port}"

    def wait_for_subscriber(self, timeout_s: float = 30.0) -> None:
        if not self.pub.poll(int(timeout_s * 1000)):
            raise TimeoutError("no subscriber came")
        self.pub.recv()  # the subscription message

    def publish(self, batch: Any, *, drop: bool = False) -> int:
        return self.send_raw(self.encoder.encode(batch), drop=drop)

    def send_raw(self, payload: bytes, *, drop: bool = False) -> int:
        seq = self.seq
        self.seq += 1
        self.buffer.append((seq, payload))
        if not drop:
            self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
        return seq

    def send_frames(self, frames: list[bytes]) -> None:
        self.pub.send_multipart(frames)

    def _serve_replays(self) -> None:
        while not self.stopped.is_set():
            if not self.router.poll(50):
                continue
            client, _, start = self.router.recv_multipart()
            if not self.replaying:
                continue  # a replay socket that never answers
            first = int.from_bytes(start, "big")
            for seq, payload in list(self.buffer):
                if seq >= first:
                    self.router.send_multipart([client, b"", seq.to_bytes(8, "big"), payload])
            self.router.send_multipart([client, b"", END_SEQ, b""])

    def close(self) -> None:
        self.stopped.set()
        self.thread.join()
        self.pub.close(linger=0)
        self.router.close(linger=0)
        self.context.term()

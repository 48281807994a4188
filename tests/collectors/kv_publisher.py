"""A loopback KV-event publisher that speaks vLLM's wire format.

The structs are vLLM's (``vllm/distributed/kv_events.py``): ``array_like`` as releases
that publish arrays send them (a batch ``[ts, events, rank]``, an event
``["BlockStored", ...]``), or maps as later releases do (``{"type": "BlockStored", ...}``,
byte hashes).  Messages are ``(topic, 8-byte big-endian seq, msgpack payload)`` on a PUB
socket; a ROUTER socket answers ``(b"", start seq)`` with every buffered ``(seq, payload)``
from there and an end marker ``(-1, b"")``, as vLLM's ``ZmqEventPublisher`` does.  The
PUB side is an XPUB, so a test can wait until the collector has subscribed instead of
sleeping.  `Publisher.restart` is an engine started again on the same ports: its
sequence numbers begin at 0 and its replay buffer is empty, as vLLM's are.
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
        self.topic = topic.encode()
        self.encoder = msgspec.msgpack.Encoder()
        self.replaying = True
        self._start(port=None, replay_port=None)

    def _start(self, port: int | None, replay_port: int | None) -> None:
        """Bind the sockets (on random ports, or these) and serve replays from a thread."""
        self.context = zmq.Context()
        self.pub = self.context.socket(zmq.XPUB)
        self.router = self.context.socket(zmq.ROUTER)
        if port is None or replay_port is None:
            self.port = self.pub.bind_to_random_port("tcp://127.0.0.1")
            self.replay_port = self.router.bind_to_random_port("tcp://127.0.0.1")
        else:
            self.pub.bind(f"tcp://127.0.0.1:{port}")
            self.router.bind(f"tcp://127.0.0.1:{replay_port}")
        self.replay_clients = self.router.get_monitor_socket(zmq.EVENT_ACCEPTED)
        self.seq = 0
        self.buffer: list[tuple[int, bytes]] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve_replays, daemon=True)
        self.thread.start()

    def restart(self) -> None:
        """Stop and start again on the same ports, as an engine restarted: what was
        sent and not yet received is lost, the sequence numbers begin at 0 again."""
        self.close()
        self._start(self.port, self.replay_port)

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

    def wait_for_replay_client(self, timeout_s: float = 30.0) -> None:
        """Wait until a collector has connected to the replay socket."""
        if not self.replay_clients.poll(int(timeout_s * 1000)):
            raise TimeoutError("no replay client came")
        self.replay_clients.recv_multipart()

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

    def resend(self, seq: int) -> None:
        """Send the batch of ``seq`` again, bytes for bytes (a delivery repeated)."""
        payload = dict(self.buffer)[seq]
        self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])

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
        self.router.disable_monitor()
        self.replay_clients.close(linger=0)
        self.pub.close(linger=0)
        self.router.close(linger=0)
        self.context.term()

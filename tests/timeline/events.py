"""Hand-made Kineto trace events for the timeline tests."""

from __future__ import annotations


def kineto_event(
    cat: str, name: str, ts: float, dur: float, stream: int | None = None, **args: object
) -> dict:
    """A complete ("X") event: on a GPU stream's thread when ``stream`` is given (with
    device 0), else on the CPU thread."""
    extra = {"stream": stream, "device": 0} if stream is not None else {}
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0 if stream is not None else 1,
        "tid": stream if stream is not None else 1,
        "ts": ts,
        "dur": dur,
        "args": {**extra, **args},
    }

"""Reading ahead in a thread: order, errors, and how far ahead it runs."""

from __future__ import annotations

import threading

import pytest

from kvtrace.prefetch import prefetched


def test_items_come_in_order_from_another_thread():
    threads = set()

    def produce():
        for i in range(10):
            threads.add(threading.current_thread().name)
            yield i

    assert list(prefetched(produce(), depth=2, name="reader")) == list(range(10))
    assert len(threads) == 1 and threads.pop().startswith("reader")


def test_an_error_in_the_thread_is_raised_in_the_caller_after_the_items_before_it():
    def produce():
        yield 1
        raise ValueError("bad chunk")

    seen = []
    with pytest.raises(ValueError, match="bad chunk"):
        for item in prefetched(produce()):
            seen.append(item)
    assert seen == [1]


@pytest.mark.parametrize("depth", [1, 3])
def test_it_runs_at_most_depth_items_ahead_and_stops_with_the_caller(depth):
    produced = []

    def produce():
        for i in range(100):
            produced.append(i)
            yield i

    items = prefetched(produce(), depth=depth)
    assert next(items) == 0
    items.close()  # the caller stops: the thread is joined
    assert len(produced) <= 1 + depth

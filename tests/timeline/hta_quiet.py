"""Running Holistic Trace Analysis in a test: without its log lines and warnings, with its
worker processes started from a fork server, and with its sorts stable."""

from __future__ import annotations

import functools
import logging
import multiprocessing
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pandas as pd


def _stable(sort: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(sort)
    def sort_stably(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["kind"] = "stable"
        return sort(self, *args, **kwargs)

    return sort_stably


@contextmanager
def quiet_hta() -> Iterator[None]:
    """HTA's logging and the warnings of its pandas code silenced for the block, its
    process pools (which HTA forks from the calling process) started from a fork server:
    a fork of the test process, whose other threads may hold a lock at that moment, can
    wait on it forever.

    HTA orders events with pandas' default sort, numpy's quicksort, which leaves equal
    times in an order that differs between CPUs (numpy sorts with the vector
    instructions it finds).  Where HTA's answer depends on that order (the previous
    event of an idle gap, a queue at an instant with a launch and a start, a merge with
    an event rounded to a negative length) no other program can give it everywhere; in
    the block HTA sorts stably, so equal times keep HTA's table order (trace order, a
    launch before a start), the order kvtrace's definitions := 'hta' use."""
    clean = multiprocessing.get_context("forkserver")
    logging.disable(logging.WARNING)
    try:
        with (
            warnings.catch_warnings(),
            mock.patch.object(multiprocessing, "get_context", lambda method=None: clean),
            mock.patch.object(multiprocessing, "Manager", clean.Manager),
            mock.patch.object(pd.DataFrame, "sort_values", _stable(pd.DataFrame.sort_values)),
            mock.patch.object(pd.Series, "sort_values", _stable(pd.Series.sort_values)),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)

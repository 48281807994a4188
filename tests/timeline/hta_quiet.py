"""Running Holistic Trace Analysis in a test: without its log lines and warnings, and with
its worker processes started from a fork server."""

from __future__ import annotations

import logging
import multiprocessing
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock


@contextmanager
def quiet_hta() -> Iterator[None]:
    """HTA's logging and the warnings of its pandas code silenced for the block, and its
    process pools (which HTA forks from the calling process) started from a fork server:
    a fork of the test process, whose other threads may hold a lock at that moment, can
    wait on it forever."""
    clean = multiprocessing.get_context("forkserver")
    logging.disable(logging.WARNING)
    try:
        with (
            warnings.catch_warnings(),
            mock.patch.object(multiprocessing, "get_context", lambda method=None: clean),
            mock.patch.object(multiprocessing, "Manager", clean.Manager),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)

"""Running Holistic Trace Analysis in a test without its log lines and warnings."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_hta() -> Iterator[None]:
    """HTA's logging and the warnings of its pandas code silenced for the block."""
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)

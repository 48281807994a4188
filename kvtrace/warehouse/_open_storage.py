"""Pick a warehouse's storage from its location: a folder, or an object-store URI.

Apart from the storages (`kvtrace.warehouse._storage`, `kvtrace.warehouse._object_storage`),
which build on the `Storage` seam and so cannot also choose between themselves.
"""

from __future__ import annotations

import os
from pathlib import Path

from kvtrace.warehouse._storage import LocalStorage, Storage, is_uri


def open_storage(location: str | os.PathLike[str]) -> Storage:
    """The storage of a warehouse at ``location``: a folder, or an object-store URI."""
    text = str(location)
    if text.startswith("file://"):
        text = text[len("file://") :]
    if is_uri(text):
        from kvtrace.warehouse._object_storage import ObjectStorage

        return ObjectStorage(text)
    return LocalStorage(Path(text))

"""The one seam for warehouse I/O: where the files live and how one is published.

`LocalStorage` keeps a warehouse in a folder; `kvtrace.warehouse._object_storage` keeps it
under a URI of an object store (``s3://bucket/prefix``, ``gs://...``, ``abfs://...``)
through Arrow's file systems, with credentials from the usual environment
(``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ...).  `kvtrace.warehouse._open_storage` picks
one from a location; Arrow loads only for an object store or code that reads with it.
Everything else in kvtrace names warehouse files by their path relative to the root.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from kvtrace.errors import WarehouseError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

TMP_DIR = "_tmp"
LOCK_DIR = "_locks"
IN_FLIGHT_DIR = "_inflight"  # on an object store: a marker per commit being written
IN_FLIGHT_S = 3600.0  # an object store's commit silent this long is taken for dead
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*)://")


def partition_value(value: object) -> str:
    """Return a directory-safe form of a partition value.

    Only letters, digits, ``.``, ``_`` and ``-`` survive; anything else becomes ``_`` and a
    short hash of the original keeps distinct values apart.  The result never starts with a
    dot, so ``..`` or ``.hidden`` cannot escape or hide.

    >>> partition_value("ruler")
    'ruler'
    >>> partition_value("../../etc")
    '_._.._etc~7baf5cb6'
    """
    text = "" if value is None else str(value)
    safe = _UNSAFE.sub("_", text)[:80]
    if safe.startswith("."):
        safe = "_" + safe[1:]
    if safe == text and safe:
        return safe
    digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{safe or '_'}~{digest}"


def is_uri(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` names an object store (``scheme://...``) rather than a folder."""
    return bool(_SCHEME.match(str(location))) and not str(location).startswith("file://")


class Storage:
    """What kvtrace needs of the place a warehouse lives."""

    location: str  # for messages: the folder or the URI

    def uri(self, relative: str) -> str:
        """The absolute name of ``relative`` that DuckDB, Arrow and the Delta log use."""
        raise NotImplementedError

    def storage_options(self) -> dict[str, str] | None:
        """Options for the Delta Lake library (None: it reads the environment)."""
        return None

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        """An Arrow file system and the root's path within it."""
        raise NotImplementedError

    def duckdb_filesystem(self) -> Any | None:
        """An fsspec file system DuckDB must register to read `uri` names (None: local)."""
        return None

    def new_temp(self, suffix: str) -> Path:
        """A fresh local path to write a file in before `publish`."""
        raise NotImplementedError

    def publish(self, temp: Path, relative: str) -> None:
        """Move a finished local file to ``relative`` at once: readers see all of it or
        nothing."""
        raise NotImplementedError

    def write_atomic(self, relative: str, data: bytes) -> None:
        self.publish(self._durable_temp(relative, data), relative)

    def _durable_temp(self, relative: str, data: bytes) -> Path:
        """A scratch file holding ``data``, on disk (fsynced), to be published as
        ``relative``."""
        temp = self.new_temp(Path(relative).suffix)
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        return temp

    def read_bytes(self, relative: str) -> bytes | None:
        """The content of ``relative``, or None when there is no such file."""
        raise NotImplementedError

    def exists(self, relative: str) -> bool:
        raise NotImplementedError

    def listdir(self, relative: str = "") -> list[str]:
        """Names of the entries directly under ``relative`` (empty when it is absent)."""
        raise NotImplementedError

    def remove(self, relative: str) -> None:
        raise NotImplementedError

    def remove_tree(self, relative: str) -> None:
        raise NotImplementedError

    def lock(self, name: str, wait: bool = True) -> AbstractContextManager[bool]:
        """A context manager holding the exclusive lock ``name`` for its block; it yields
        whether it holds it (always, unless ``wait`` is False and another holds it)."""
        raise NotImplementedError

    def dead_holds(self) -> list[str]:
        """The in-flight marks (paths relative to the root) that outlived their writers."""
        raise NotImplementedError

    def stale_temps(self, older_than_s: float) -> list[Path]:
        """Scratch files left by writers that died more than ``older_than_s`` ago."""
        return []

    def list_files(self, relative: str) -> dict[str, int]:
        """Every file below ``relative`` (recursively): path relative to the root -> size."""
        raise NotImplementedError

    def move(self, relative: str, target: str) -> None:
        """Move the file ``relative`` to ``target`` (both relative to the root)."""
        raise NotImplementedError

    # -- commits in flight -----------------------------------------------------------------

    def hold_commit(self, commit_id: str) -> CommitHold:
        """Mark ``commit_id`` as being written until the hold is released: maintenance
        never takes a file of a commit in flight for a leftover."""
        raise NotImplementedError

    def commit_alive(self, commit_id: str) -> bool:
        """Whether the writer of ``commit_id`` is still at it."""
        raise NotImplementedError


class CommitHold:
    """A commit's mark of being in flight; `release` takes it away (idempotent)."""

    def touch(self) -> None:
        """Say the writer is still at it (a file of the commit was just published)."""

    def release(self) -> None:
        raise NotImplementedError


class _FileHold(CommitHold):
    """An advisory lock on a file of its own, held by an open descriptor: the operating
    system lets it go when the writer dies, however it dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle: BinaryIO | None = open(path, "a+b")  # noqa: SIM115 (held open)
        fcntl.flock(self.handle, fcntl.LOCK_EX)

    def release(self) -> None:
        if self.handle is None:
            return
        self.path.unlink(missing_ok=True)  # before unlocking: nobody locks a stale file
        self.handle.close()
        self.handle = None


class MarkerHold(CommitHold):
    """A marker object on a store, removed when the commit ends (a writer that died
    leaves it; it goes stale after `IN_FLIGHT_S`)."""

    def __init__(self, storage: Storage, relative: str) -> None:
        self.storage, self.relative = storage, relative
        self.touch()

    def touch(self) -> None:
        self.storage.write_atomic(self.relative, str(time.time()).encode())

    def release(self) -> None:
        if self.relative:
            self.storage.remove(self.relative)
            self.relative = ""


class LocalStorage(Storage):
    """A warehouse in a folder of the local file system (the embedded default)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.location = str(self.root)

    def path(self, relative: str) -> Path:
        """Absolute path of ``relative``, refusing anything that would leave the root."""
        target = (self.root / relative).resolve()
        if target != self.root and self.root not in target.parents:
            raise WarehouseError(f"path {relative!r} would leave the warehouse {self.root}")
        return target

    def uri(self, relative: str) -> str:
        return str(self.path(relative))

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        import pyarrow.fs as pafs

        return pafs.LocalFileSystem(), str(self.root)

    def new_temp(self, suffix: str) -> Path:
        """A path in the warehouse's scratch folder (one file system: rename is atomic)."""
        tmp = self.root / TMP_DIR
        tmp.mkdir(parents=True, exist_ok=True)
        return tmp / f"{os.getpid()}-{uuid.uuid4().hex}{suffix}"

    def publish(self, temp: Path, relative: str) -> None:
        target = self.path(relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(temp, target)

    def write_new(self, relative: str, data: bytes) -> bool:
        """Write ``data`` to ``relative`` whole unless it exists; False when it did (another
        writer's stays).  A hard link publishes the file without replacing one."""
        target = self.path(relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = self._durable_temp(relative, data)
        try:
            os.link(temp, target)
        except FileExistsError:
            return False
        finally:
            temp.unlink(missing_ok=True)
        return True

    def read_bytes(self, relative: str) -> bytes | None:
        try:
            return self.path(relative).read_bytes()
        except FileNotFoundError:
            return None

    def exists(self, relative: str) -> bool:
        return self.path(relative).exists()

    def listdir(self, relative: str = "") -> list[str]:
        folder = self.path(relative)
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []

    def remove(self, relative: str) -> None:
        self.path(relative).unlink(missing_ok=True)

    def remove_tree(self, relative: str) -> None:
        shutil.rmtree(self.path(relative), ignore_errors=True)

    @contextmanager
    def lock(self, name: str, wait: bool = True) -> Iterator[bool]:
        """An advisory file lock: other processes asking for ``name`` wait (or, not to
        ``wait``, go on without it)."""
        folder = self.root / LOCK_DIR
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{partition_value(name)}.lock", "a+b") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def stale_temps(self, older_than_s: float) -> list[Path]:
        folder = self.root / TMP_DIR
        if not folder.is_dir():
            return []
        cutoff = time.time() - older_than_s
        stale = []
        for path in folder.iterdir():
            with suppress(FileNotFoundError):  # another writer may take it away at once
                if path.stat().st_mtime < cutoff:
                    stale.append(path)
        return stale

    def list_files(self, relative: str) -> dict[str, int]:
        top = self.path(relative)
        found = {}
        for folder, _, names in os.walk(top):
            for name in names:
                with suppress(FileNotFoundError):
                    path = Path(folder) / name
                    found[str(path.relative_to(self.root))] = path.stat().st_size
        return found

    def move(self, relative: str, target: str) -> None:
        destination = self.path(target)
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.path(relative), destination)

    def hold_commit(self, commit_id: str) -> CommitHold:
        folder = self.root / LOCK_DIR
        folder.mkdir(parents=True, exist_ok=True)
        return _FileHold(folder / f"commit-{commit_id}.lock")

    def commit_alive(self, commit_id: str) -> bool:
        try:
            handle = open(self.root / LOCK_DIR / f"commit-{commit_id}.lock", "r+b")  # noqa: SIM115
        except FileNotFoundError:
            return False  # finished (the hold is gone), or written before holds existed
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
            return False

    def dead_holds(self) -> list[str]:
        folder = self.root / LOCK_DIR
        names = [p.name for p in folder.glob("commit-*.lock")] if folder.is_dir() else []
        return [
            f"{LOCK_DIR}/{name}"
            for name in names
            if not self.commit_alive(name[len("commit-") : -len(".lock")])
        ]

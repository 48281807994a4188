"""A warehouse under an object-store URI (``s3://bucket/prefix``, ``gs://...``,
``abfs://...``), through Arrow's file systems."""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from kvtrace.errors import WarehouseError
from kvtrace.warehouse._storage import IN_FLIGHT_DIR, IN_FLIGHT_S, CommitHold, MarkerHold, Storage


class ObjectStorage(Storage):
    """A warehouse under an object-store URI.

    A file is uploaded whole under its final name (an object store shows a new object
    all at once); the Delta log decides which objects are part of a table.
    """

    def __init__(self, uri: str) -> None:
        self.location = uri.rstrip("/")
        try:
            self.filesystem, self.root = pafs.FileSystem.from_uri(self.location)
        except (OSError, ValueError) as exc:
            raise WarehouseError(f"cannot open the warehouse {self.location}: {exc}") from None
        self.root = self.root.rstrip("/")

    def _key(self, relative: str) -> str:
        parts = [p for p in relative.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise WarehouseError(f"path {relative!r} would leave the warehouse {self.location}")
        return "/".join([self.root, *parts])

    def uri(self, relative: str) -> str:
        return "/".join([self.location, *[p for p in relative.split("/") if p]])

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        return self.filesystem, self.root

    def duckdb_filesystem(self) -> Any:
        from fsspec.implementations.arrow import ArrowFSWrapper

        return ArrowFSWrapper(self.filesystem)

    def new_temp(self, suffix: str) -> Path:
        """A path in the system's scratch folder (uploaded, then removed, by `publish`)."""
        return Path(tempfile.gettempdir()) / f"kvtrace-{os.getpid()}-{uuid.uuid4().hex}{suffix}"

    def publish(self, temp: Path, relative: str) -> None:
        try:
            pafs.copy_files(
                str(temp),
                self._key(relative),
                source_filesystem=pafs.LocalFileSystem(),
                destination_filesystem=self.filesystem,
            )
        except OSError as exc:
            raise WarehouseError(f"cannot upload {relative} to {self.location}: {exc}") from None
        finally:
            temp.unlink(missing_ok=True)

    def read_bytes(self, relative: str) -> bytes | None:
        try:
            with self.filesystem.open_input_stream(self._key(relative)) as stream:
                data: bytes = stream.read()
                return data
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise WarehouseError(f"cannot read {self.uri(relative)}: {exc}") from None

    def exists(self, relative: str) -> bool:
        info = self.filesystem.get_file_info(self._key(relative))
        return bool(info.type != pafs.FileType.NotFound)

    def listdir(self, relative: str = "") -> list[str]:
        selector = pafs.FileSelector(self._key(relative), allow_not_found=True)
        try:
            infos = self.filesystem.get_file_info(selector)
        except OSError as exc:
            raise WarehouseError(f"cannot list {self.location}: {exc}") from None
        return sorted(info.base_name for info in infos)

    def remove(self, relative: str) -> None:
        with suppress(FileNotFoundError):
            self.filesystem.delete_file(self._key(relative))

    def remove_tree(self, relative: str) -> None:
        with suppress(FileNotFoundError):
            self.filesystem.delete_dir(self._key(relative))

    @contextmanager
    def lock(self, name: str, wait: bool = True) -> Iterator[bool]:
        from kvtrace.warehouse._object_lock import hold

        with hold(self, name, wait) as held:
            yield held

    def list_files(self, relative: str) -> dict[str, int]:
        selector = pafs.FileSelector(self._key(relative), recursive=True, allow_not_found=True)
        try:
            infos = self.filesystem.get_file_info(selector)
        except OSError as exc:
            raise WarehouseError(f"cannot list {self.location}: {exc}") from None
        prefix = len(self.root) + 1
        return {info.path[prefix:]: info.size for info in infos if info.type == pafs.FileType.File}

    def move(self, relative: str, target: str) -> None:
        self.filesystem.copy_file(self._key(relative), self._key(target))
        self.filesystem.delete_file(self._key(relative))

    def hold_commit(self, commit_id: str) -> CommitHold:
        return MarkerHold(self, f"{IN_FLIGHT_DIR}/{commit_id}")

    def commit_alive(self, commit_id: str) -> bool:
        info = self.filesystem.get_file_info(self._key(f"{IN_FLIGHT_DIR}/{commit_id}"))
        if info.type == pafs.FileType.NotFound or info.mtime is None:
            return False
        return bool(time.time() - info.mtime.timestamp() < IN_FLIGHT_S)

    def dead_holds(self) -> list[str]:
        return [
            f"{IN_FLIGHT_DIR}/{name}"
            for name in self.listdir(IN_FLIGHT_DIR)
            if not self.commit_alive(name)
        ]

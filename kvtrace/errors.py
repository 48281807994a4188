"""Typed errors: the library raises these, the CLI turns them into one sentence."""


class KvtraceError(Exception):
    """Base class of every error kvtrace reports to its users."""


class InputError(KvtraceError):
    """A source file, path or option the user gave cannot be used."""


class WarehouseError(KvtraceError):
    """The warehouse is missing, unreadable or inconsistent."""


class JournalUnreadable(WarehouseError):
    """A file of the warehouse's journal cannot be read; ``what`` says what is wrong
    with it, without the advice to run ``kvtrace check`` (which reports it itself)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what}; 'kvtrace check' says what is wrong")
        self.what = what


class WarehouseDamaged(WarehouseError):
    """``kvtrace check`` found problems (it has printed them)."""


class QueryError(KvtraceError):
    """A SQL statement was refused or failed."""


class IngestRejected(KvtraceError):
    """Lines were rejected and the caller asked for a strict ingest."""


class Terminated(BaseException):
    """The process was asked to stop (SIGTERM, as systemd, docker and Kubernetes send).

    A `BaseException`, like `KeyboardInterrupt`, so that no ``except Exception`` on the
    way swallows it; collectors stop on it as they do on Ctrl-C.
    """

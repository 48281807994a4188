"""kvtrace's tables as Delta Lake tables: creating them, adding files, listing a version.

Every table lives in ``<warehouse>/<table>/`` with its log in ``_delta_log/``.  kvtrace
writes the Parquet files itself (its tuned encodings) and adds them to the log in one
commit per table, carrying an application transaction id: a commit whose id the table
already holds is not made again, which is how one source lands once however many
processes ingest it.  No Delta partition columns are declared: the partition folders are
part of the file names and the columns stay inside the files, where every reader finds
them; per-file statistics let engines skip files instead.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, Schema
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

from kvtrace._version import __version__
from kvtrace.errors import WarehouseError
from kvtrace.warehouse._log_entry import DAMAGED
from kvtrace.warehouse._storage import LocalStorage, Storage

COMMIT_ID_KEY = "kvtrace.commit_id"
APP_ID_KEY = "kvtrace.app_id"
GENERATION_KEY = "kvtrace.generation"
OPERATION_KEY = "kvtrace.operation"  # a maintenance commit's kind: cleanup, repair


@dataclass
class DataFile:
    """A finished Parquet file of a table, named relative to the warehouse root."""

    path: str  # "<table>/<partition folders>/<name>.parquet"
    size: int
    rows: int
    stats: str  # Delta's per-file statistics, JSON

    @property
    def table(self) -> str:
        return self.path.split("/", 1)[0]


def file_stats(metadata: pq.FileMetaData) -> str:
    """Delta statistics of a Parquet file from its footer: row count, null counts, and
    minimum and maximum of its integer and string columns (exact: taken from every row
    group, and left out where a row group has none)."""
    schema = metadata.schema.to_arrow_schema()
    nulls: dict[str, int] = {}
    lows: dict[str, Any] = {}
    highs: dict[str, Any] = {}
    for index, field in enumerate(schema):
        if pa.types.is_nested(field.type):
            continue
        column_stats = [
            metadata.row_group(g).column(index).statistics for g in range(metadata.num_row_groups)
        ]
        if all(s is not None and s.has_null_count for s in column_stats):
            nulls[field.name] = sum(s.null_count for s in column_stats)
        ranged = pa.types.is_integer(field.type) or pa.types.is_string(field.type)
        if ranged and column_stats and all(s is not None and s.has_min_max for s in column_stats):
            lows[field.name] = min(s.min for s in column_stats)
            highs[field.name] = max(s.max for s in column_stats)
    return json.dumps(
        {"numRecords": metadata.num_rows, "minValues": lows, "maxValues": highs, "nullCount": nulls}
    )


def publish_file(storage: Storage, temp: Path, relative: str) -> DataFile:
    """Move the finished Parquet file ``temp`` to ``relative`` (its table's folder, not yet
    in the table's log) and describe it: size, rows and statistics from its footer."""
    metadata = pq.read_metadata(temp)
    data_file = DataFile(relative, temp.stat().st_size, metadata.num_rows, file_stats(metadata))
    storage.publish(temp, relative)
    return data_file


def open_table(storage: Storage, name: str, version: int | None = None) -> DeltaTable | None:
    """The Delta table ``name`` (at ``version``), or None when it was never created.

    A log that cannot be read is a `WarehouseError` that names ``kvtrace check``; a
    version is read from the entries up to it alone, so a damaged later entry does not
    hide it.
    """
    try:
        table = DeltaTable(
            storage.uri(name), version=version, storage_options=storage.storage_options()
        )
    except TableNotFoundError:
        return None
    except (DeltaError, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else repr(exc)
        raise WarehouseError(
            f"table {name} of {storage.location} cannot be read ({first}); {DAMAGED}"
        ) from None
    return table


# Commits between two checkpoints of a table's log: a reader replays at most this many
# JSON commits after the newest checkpoint (Delta Lake's own default; delta-rs writes 100).
CHECKPOINT_INTERVAL = 10
TABLE_CONFIGURATION = {"delta.checkpointInterval": str(CHECKPOINT_INTERVAL)}
LOG_DIR = "_delta_log"


def create_table(storage: Storage, name: str, schema: pa.Schema) -> None:
    """Create the empty table ``name`` unless it exists (several processes may race),
    checkpointed every `CHECKPOINT_INTERVAL` commits.

    On local disk kvtrace writes version 0 of the log itself (`version_zero`, published
    only where no entry is: 0.2 ms instead of Delta Lake's 6 ms a table); on an object
    store Delta Lake creates it, with the store's own put-if-absent.
    """
    if isinstance(storage, LocalStorage):
        if not storage.listdir(f"{name}/{LOG_DIR}"):
            storage.write_new(f"{name}/{LOG_DIR}/{0:020d}.json", version_zero(schema))
        return
    try:
        DeltaTable.create(
            storage.uri(name),
            schema=schema,
            mode="ignore",
            storage_options=storage.storage_options(),
            configuration=dict(TABLE_CONFIGURATION),
        )
    except (CommitFailedError, DeltaError) as exc:
        if open_table(storage, name) is None:
            raise WarehouseError(
                f"cannot create table {name} in {storage.location}: {exc}"
            ) from None


def version_zero(schema: pa.Schema) -> bytes:
    """Version 0 of a Delta log that creates an empty table of ``schema`` under a new
    table id: the protocol and metadata Delta Lake writes for it (no partition columns,
    `TABLE_CONFIGURATION`; a time without a zone needs the ``timestampNtz`` feature)."""
    schema_string = Schema.from_arrow(schema).to_json()
    protocol: dict[str, Any] = {"minReaderVersion": 1, "minWriterVersion": 2}
    if '"timestamp_ntz"' in schema_string:
        protocol = {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["timestampNtz"],
            "writerFeatures": ["timestampNtz"],
        }
    now_ms = int(time.time() * 1000)
    metadata: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "name": None,
        "description": None,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": schema_string,
        "partitionColumns": [],
        "createdTime": now_ms,
        "configuration": dict(TABLE_CONFIGURATION),
    }
    commit_info = {
        "timestamp": now_ms,
        "operation": "CREATE TABLE",
        "operationParameters": {"mode": "Ignore"},
        "clientVersion": f"kvtrace-{__version__}",
    }
    actions = [{"commitInfo": commit_info}, {"protocol": protocol}, {"metaData": metadata}]
    return "".join(json.dumps(action, separators=(",", ":")) + "\n" for action in actions).encode()


def add_files(
    storage: Storage,
    name: str,
    schema: pa.Schema,
    files: list[DataFile],
    app_id: str,
    commit_id: str,
    generation: int = 1,
) -> tuple[int, str]:
    """Add ``files`` to table ``name`` in one commit unless the table already holds the
    transaction ``app_id`` at ``generation`` (`kvtrace.warehouse._journal`).

    Returns the table version to read and the id of the commit whose files the table
    holds for ``app_id``: ours, or that of the process that got there first.
    """
    actions = add_actions(files)
    evolved = created = False
    while True:
        table = open_table(storage, name)
        if table is None:
            if created:  # a log folder whose entries Delta Lake does not take for a table
                raise WarehouseError(f"table {name} of {storage.location} has no log; {DAMAGED}")
            create_table(storage, name, schema)
            created = True
            continue
        if (table.transaction_version(app_id) or 0) >= generation:
            return table.version(), _committer(table, app_id, generation)
        if not evolved and ensure_columns(table, schema):
            evolved = True
            continue
        try:
            table.create_write_transaction(
                actions,
                mode="append",
                schema=schema,
                commit_properties=CommitProperties(
                    custom_metadata={
                        COMMIT_ID_KEY: commit_id,
                        APP_ID_KEY: app_id,
                        GENERATION_KEY: str(generation),
                    },
                    app_transactions=[Transaction(app_id, generation)],
                ),
            )
        except CommitFailedError:
            continue  # a concurrent commit: look again whether it was this transaction
        return open_table(storage, name).version(), commit_id  # type: ignore[union-attr]


def commit_actions(
    table: DeltaTable,
    schema: pa.Schema,
    actions: list[AddAction | RemoveAction],
    operation: str,
    commit_id: str,
) -> int:
    """Commit ``actions`` to ``table`` as the maintenance ``operation`` of kvtrace commit
    ``commit_id`` (cleanup, repair); the table's new version."""
    table.create_write_transaction(
        actions,
        mode="append",
        schema=schema,
        commit_properties=CommitProperties(
            custom_metadata={OPERATION_KEY: operation, COMMIT_ID_KEY: commit_id}
        ),
    )
    table.update_incremental()
    return table.version()


def add_actions(files: list[DataFile]) -> list[AddAction | RemoveAction]:
    """The log actions that add ``files`` (paths relative to the root) to their table."""
    now_ms = int(time.time() * 1000)  # when the files joined the log (for their age)
    return [AddAction(f.path.split("/", 1)[1], f.size, {}, now_ms, True, f.stats) for f in files]


def ensure_columns(table: DeltaTable, schema: pa.Schema) -> bool:
    """Add to ``table`` the columns of ``schema`` it lacks; False when it lacks none."""
    if not _missing_columns(table, schema):
        return False
    _add_columns(table, schema)
    return True


def _missing_columns(table: DeltaTable, schema: pa.Schema) -> list[pa.Field]:
    """Columns of kvtrace's schema that the table's (an older kvtrace's) lacks."""
    present = {field.name for field in table.schema().fields}
    return [field for field in schema if field.name not in present]


def _add_columns(table: DeltaTable, schema: pa.Schema) -> None:
    """Add the columns a newer kvtrace writes to an older table's schema (other engines
    then see them; older files read them as NULL).  Another writer may do it at once."""
    missing = pa.schema(_missing_columns(table, schema))
    with contextlib.suppress(CommitFailedError, DeltaError):
        table.alter.add_columns(list(Schema.from_arrow(missing).fields))


def _committer(table: DeltaTable, app_id: str, generation: int) -> str:
    """The kvtrace commit id of the table commit that carried ``app_id``'s generation."""
    for entry in table.history():
        if entry.get(APP_ID_KEY) == app_id and int(entry.get(GENERATION_KEY, 1)) >= generation:
            return str(entry[COMMIT_ID_KEY])
    raise WarehouseError(
        f"table {table.table_uri} holds transaction {app_id} but not the commit that made it"
    )


def active_files(table: DeltaTable) -> pa.Table:
    """The files of the table's loaded version: path (relative to the table), size_bytes,
    num_records, and the run_id range when the statistics hold it."""
    actions = pa.table(table.get_add_actions(flatten=True))
    columns = {
        "path": actions["path"],
        "size_bytes": actions["size_bytes"],
        "num_records": actions["num_records"],
    }
    for bound in ("min", "max"):
        name = f"{bound}.run_id"
        columns[f"{bound}_run_id"] = (
            actions[name]
            if name in actions.column_names
            else pa.nulls(actions.num_rows, pa.string())
        )
    return pa.table(columns)

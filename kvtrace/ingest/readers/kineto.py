"""Read PyTorch profiler (Kineto) traces: Chrome trace JSON with ``traceEvents``.

Complete events (``"ph": "X"``) become ``timeline_events`` rows: pid and tid as text
(Kineto writes numbers or names), the CUDA stream, device, correlation and external id
from ``args``; for ``gpu_memcpy`` events the copy kind from the name (``Memcpy DtoH
(Device -> Pageable)`` is ``DtoH``) and ``args.bytes``.  Metadata events and other phases
are left out; an event without a numeric ``ts`` and ``dur``, or with an id or byte
count that is a fractional number or beyond int64, goes to the quarantine (an id given as
text or a boolean reads as null).  An event that repeats an earlier one exactly (every
value its row keeps, and the ids Kineto gives events, ``Ev Idx`` and ``Python id``, when
it gives them) is stored once (`kvtrace.ingest._repeats`).  The
iteration (``ProfilerStep#N``) of each event is worked out by the ``timeline_events``
view, so the file is read once.  The trace's ``distributedInfo`` gives the rank and goes
to ``runs`` with the schema version (Kineto writes these keys before the events; a rank
given only after them is missing from the rows).

Counter events (``"ph": "C"``, ``args`` = ``{series: value, ...}``, as Kineto's
``ChromeTraceLogger::writeCounterEvent`` writes them) become ``timeline_counters`` rows,
one per series, on the same clock and rank as the complete events: the counter is the
event's name, the series the key inside ``args`` (Kineto's hardware counters write one
series named ``""``).  A series whose value is not a number goes to the quarantine, the
event's other series are kept.  The trace's ``baseTimeNanoseconds`` (the Unix time its
``ts`` values count from, newer Kineto versions) goes to ``runs`` with the schema version.

Memory stays bounded: the file (plain or gzip) is read in 1 MB blocks; the events of the
``traceEvents`` array up to a block's last event boundary are decoded in one call into
`Event` structs that hold only the fields the table keeps (msgspec skips the rest
unread; one at a time with ``json.JSONDecoder.raw_decode`` where that fails, or an event
straddles the block's end) and built into columns at once; about ``BATCH_EVENTS`` rows are handed on
as one Arrow batch.  The other top-level keys (``distributedInfo``, ``deviceProperties``,
...) are small and decoded whole.
"""

from __future__ import annotations

import gzip
import json
import operator
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import msgspec
import numpy as np
import pyarrow as pa

from kvtrace.errors import InputError
from kvtrace.ingest._lines import NESTED_TOO_DEEPLY, is_gzip
from kvtrace.ingest._repeats import Repeats
from kvtrace.ingest._sources import printable
from kvtrace.ingest._values import EXACT_LIMIT, BadValue, finite_number, whole_number
from kvtrace.ingest.family import Advance, FileRows, IngestOptions
from kvtrace.ingest.probe import Probe
from kvtrace.ingest.readers._counter_rows import (
    DIGESTED as COUNTER_DIGESTED,
)
from kvtrace.ingest.readers._counter_rows import (
    NO_LABELS,
    CounterRow,
    counter_table,
    counter_time,
    counter_value,
    is_plain_value,
)
from kvtrace.ingest.sink import REPEATED, FileSink
from kvtrace.warehouse.rows.rejects import BadLine
from kvtrace.warehouse.schema.timeline import TIMELINE_COUNTERS, TIMELINE_EVENTS

BLOCK_BYTES = 1 << 20
BATCH_EVENTS = 50_000
_LOOKAHEAD = 1 << 16
_TAIL = 1 << 16  # how far back from a block's end to look for the last event boundary
_COPY_KIND = re.compile(r"Memcpy (\w+)")
_SPACE = re.compile(r"[\s,]*")  # between elements and between keys
_WHITESPACE = re.compile(r"\s*")
_COLON = re.compile(r"\s*:\s*")
_BOUNDARY = re.compile(r"\}\s*,\s*\{")
_DECODER = json.JSONDecoder()
_DISTRIBUTED_INFO = re.compile(rb'"distributedInfo"\s*:\s*(\{[^{}]*\})')
TOO_DEEP = object()  # stands for a value nested too deeply to decode


class EventArgs(msgspec.Struct, gc=False):
    """The ``args`` of an event that the table keeps (any others are skipped unread)."""

    stream: Any = None
    device: Any = None
    correlation: Any = None
    external_id: Any = msgspec.field(name="External id", default=None)
    bytes: Any = None
    wait_on_stream: Any = None
    wait_on_correlation: Any = msgspec.field(name="wait_on_cuda_event_record_corr_id", default=None)
    memory_bw_gbps: Any = msgspec.field(name="memory bandwidth (GB/s)", default=None)
    # not kept, but they tell apart events that are alike in every kept value
    event_index: Any = msgspec.field(name="Ev Idx", default=None)
    python_id: Any = msgspec.field(name="Python id", default=None)


class Event(msgspec.Struct, gc=False):
    """The fields of a trace event that the table keeps, as the trace gives them."""

    ph: Any = None
    cat: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: EventArgs | None = None


class CounterArgs(msgspec.Struct, gc=False):
    """An event's phase and its ``args`` undecoded: a run holding counter events is
    read a second time as these, and only the counter events' ``args`` are decoded."""

    ph: Any = None
    args: msgspec.Raw = msgspec.Raw(b"null")


@dataclass(frozen=True, slots=True)
class CounterEvent:
    """A counter event (``"ph": "C"``): its other fields as an `Event`, its ``args``
    (``{series: value}``) as decoded."""

    event: Event
    args: Any


_NO_ARGS = EventArgs()
_EVENT_RUN = msgspec.json.Decoder(list[Event])
_COUNTER_ARGS_RUN = msgspec.json.Decoder(list[CounterArgs])
_INT_ARGS = (
    "stream",
    "device",
    "correlation",
    "external_id",
    "bytes",
    "wait_on_stream",
    "wait_on_correlation",
)
# the ids a batch carries until its exact repeats are left out
_IDS = {"ev_idx": operator.attrgetter("event_index"), "python_id": operator.attrgetter("python_id")}
# what tells events apart: every column but the run, the rank (one for all events of a
# file) and the event's place in the file; and their ids
_DIGESTED = (
    *(c for c in TIMELINE_EVENTS.schema.names if c not in ("run_id", "rank", "event_idx")),
    *_IDS,
)


@dataclass
class KinetoHeader:
    """What a trace says about itself besides its events."""

    rank: int | None = None
    run_config: dict[str, Any] = field(default_factory=dict)


@dataclass
class KinetoReader:
    """Stream a trace's complete events as Arrow batches; ``rejected`` and ``header``
    are filled in as the file is read."""

    path: Path
    rejected: list[BadLine] = field(default_factory=list)
    header: KinetoHeader = field(default_factory=KinetoHeader)
    repeated: int = 0  # events (and counter values) left out as exact repeats
    _seen: Repeats = field(default_factory=Repeats, repr=False)
    _counters_seen: Repeats = field(default_factory=Repeats, repr=False)
    _counters: list[pa.Table] = field(default_factory=list, repr=False)

    def take_counters(self) -> list[pa.Table]:
        """The ``timeline_counters`` batches read since the last call; call it after
        each batch `batches` yields and once after the last (those read after the last
        batch carry the rank the whole header gives)."""
        taken, self._counters = self._counters, []
        return taken

    def batches(self, progress: Callable[[int], None] | None = None) -> Iterator[pa.Table]:
        """Batches of about `BATCH_EVENTS` rows; each run of decoded events becomes
        columns at once, so few events are held as Python objects at any time."""
        pending: list[pa.Table] = []
        others: dict[str, Any] = {}
        index = held = 0
        for run in _event_runs(self.path, others, progress):
            kept = [
                (i, event)
                for i, event in enumerate(run, index)
                if type(event) is Event and event.ph == "X"
            ]
            if len(kept) < len(run):  # metadata events, other phases, counters, too deep
                unusual = [(i, e) for i, e in enumerate(run, index) if type(e) is not Event]
                self.rejected += [
                    BadLine(i + 1, NESTED_TOO_DEEPLY, "") for i, e in unusual if e is TOO_DEEP
                ]
                counters = [(i, e) for i, e in unusual if type(e) is CounterEvent]
                if counters:
                    self._read_header(others)
                    self._keep_counters(counters)
            index += len(run)
            del run
            if kept:
                pending.append(self._table(kept, others))
                held += pending[-1].num_rows
            if held >= BATCH_EVENTS:
                yield self._first_only(pa.concat_tables(pending))
                pending, held = [], 0
        self._read_header(others)
        self._counters = [self._with_rank(table) for table in self._counters]
        if pending:
            yield self._with_rank(self._first_only(pa.concat_tables(pending)))

    def _keep_counters(self, counters: list[tuple[int, CounterEvent]]) -> None:
        """The counter events' values as one ``timeline_counters`` batch, less exact
        repeats; series that are not numbers go to ``rejected``."""
        rows: list[CounterRow] = []
        for index, counter in counters:
            rows += self._counter_rows(index, counter)
        if not rows:
            return
        table = counter_table(rows, self.header.rank, "kineto")
        first = self._counters_seen.first_seen([table[c] for c in COUNTER_DIGESTED])
        if not first.all():
            self.repeated += int(np.count_nonzero(~first))
            table = table.filter(pa.array(first))
        self._counters.append(table)

    def _counter_rows(self, index: int, counter: CounterEvent) -> list[CounterRow]:
        """One row per numeric series of a counter event."""
        event, args = counter.event, counter.args
        try:
            ts = counter_time("ts", event.ts)
        except BadValue as exc:
            reason = f"a C event needs a numeric ts: {exc}"
            self.rejected.append(BadLine(index + 1, reason, _counter_raw(event, args)))
            return []
        if type(args) is not dict or not args:
            reason = "a C event needs args that map series to numbers"
            self.rejected.append(BadLine(index + 1, reason, _counter_raw(event, args)))
            return []
        pid, name = None if event.pid is None else str(event.pid), str(event.name)
        rows, bad = [], []
        for series, value in args.items():
            if not is_plain_value(value):
                try:
                    counter_value(f"args.{series}", value)  # says what is wrong
                except BadValue as exc:
                    bad.append(str(exc))
                    continue
            rows.append(CounterRow(index, pid, name, series, NO_LABELS, ts, float(value)))
        if bad:
            reason = f"a C event's series must be numbers: {'; '.join(bad)}"[:500]
            self.rejected.append(BadLine(index + 1, reason, _counter_raw(event, args)))
        return rows

    def _first_only(self, rows: pa.Table) -> pa.Table:
        """``rows`` (with the events' ids beside them) less exact repeats of events
        before them, without the ids."""
        first = self._seen.first_seen([rows[column] for column in _DIGESTED])
        rows = rows.drop_columns(list(_IDS))
        if first.all():
            return rows
        self.repeated += int(np.count_nonzero(~first))
        return rows.filter(pa.array(first))

    def _with_rank(self, rows: pa.Table) -> pa.Table:
        """``rows`` with the rank the header gave (it may come after the events)."""
        rank = pa.repeat(pa.scalar(self.header.rank, pa.int32()), rows.num_rows)
        return rows.set_column(rows.column_names.index("rank"), "rank", rank)

    def _checked(self, kept: list[tuple[int, Event]]) -> list[tuple[int, Event]]:
        """The events whose values the table can hold; the others go to ``rejected``."""
        good = []
        for index, event in kept:
            try:
                finite_number("ts", event.ts)
                finite_number("dur", event.dur, minimum=0)
                for key in _INT_ARGS:
                    value = getattr(event.args or _NO_ARGS, key)
                    if _is_number(value):
                        whole_number(f"args.{key}", value, minimum=None)
            except BadValue as exc:
                self.rejected.append(
                    BadLine(
                        index + 1, f"an X event needs numeric ts and dur >= 0: {exc}", _raw(event)
                    )
                )
                continue
            good.append((index, event))
        return good

    def _table(self, kept: list[tuple[int, Event]], others: dict[str, Any]) -> pa.Table:
        """The events as one batch, built column by column, their ids beside them."""
        self._read_header(others)
        events = [event for _, event in kept]
        ts, dur, integers, bandwidth = _numbers(events)
        if not (_all_in_range(ts, dur) and all(integers.values())):
            kept = self._checked(kept)  # the rare batch with a bad event: find it
            events = [event for _, event in kept]
            ts, dur, integers, bandwidth = _numbers(events)
        category = [str(event.cat) for event in events]
        name = [str(event.name) for event in events]
        copy_names = {n for c, n in zip(category, name, strict=True) if c == "gpu_memcpy"}
        kinds = {n: m.group(1) if (m := _COPY_KIND.match(n)) else None for n in copy_names}
        columns = {
            "run_id": pa.nulls(len(kept), pa.string()),
            "rank": pa.repeat(pa.scalar(self.header.rank, pa.int32()), len(kept)),
            "event_idx": pa.array([index for index, _ in kept], pa.int64()),
            "pid": pa.array([str(event.pid) for event in events], pa.string()),
            "tid": pa.array([str(event.tid) for event in events], pa.string()),
            "category": pa.array(category, pa.string()),
            "name": pa.array(name, pa.string()),
            "ts_us": pa.array(ts, pa.float64()),
            "dur_us": pa.array(dur, pa.float64()),
            "copy_kind": pa.array(
                [
                    kinds[n] if c == "gpu_memcpy" else None
                    for c, n in zip(category, name, strict=True)
                ],
                pa.string(),
            ),
            **integers,
            "memory_bw_gbps": _floats(bandwidth),
        }
        rows = pa.table(columns, schema=TIMELINE_EVENTS.schema)
        args = [event.args or _NO_ARGS for event in events]
        for column, getter in _IDS.items():
            rows = rows.append_column(column, _identity(list(map(getter, args))))
        return rows

    def _read_header(self, others: dict[str, Any]) -> None:
        info = others.get("distributedInfo")
        info = info if isinstance(info, dict) else {}
        self.header.rank = info.get("rank") if isinstance(info.get("rank"), int) else None
        base = others.get("baseTimeNanoseconds")
        self.header.run_config = {
            "schema_version": others.get("schemaVersion"),
            "distributed_info": info,
            **({"base_time_ns": base} if type(base) is int else {}),
            **(
                {"device_properties": others["deviceProperties"]}
                if "deviceProperties" in others
                else {}
            ),
        }


def _blocks(path: Path) -> Iterator[str]:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            while block := handle.read(BLOCK_BYTES):
                yield block.decode("utf-8", errors="replace")
    except (OSError, EOFError) as exc:
        raise InputError(f"{path} is not a readable trace: {exc}") from None


def _event_runs(
    path: Path, others: dict[str, Any], progress: Callable[[int], None] | None
) -> Iterator[list[Any]]:
    """The elements of the top-level ``traceEvents`` array, in order, in runs (lists);
    the other top-level values go into ``others``."""
    blocks = _blocks(path)
    buffer, at, read = "", 0, 0

    def refill() -> bool:
        nonlocal buffer, at, read
        block = next(blocks, None)
        if block is None:
            return False
        buffer, at = buffer[at:] + block, 0
        read += len(block)
        if progress:
            progress(read)
        return True

    def skip(pattern: re.Pattern[str]) -> None:
        nonlocal at
        while True:
            at = pattern.match(buffer, at).end()  # type: ignore[union-attr]
            if at < len(buffer) or not refill():
                return

    def value() -> object:
        nonlocal at
        while len(buffer) - at < _LOOKAHEAD and refill():
            pass  # a number or name is never decoded cut short at a block's end
        while True:
            try:
                decoded, at = _DECODER.raw_decode(buffer, at)
                return decoded
            except RecursionError:
                skip_nested()
                return TOO_DEEP
            except json.JSONDecodeError as exc:
                if not refill():
                    raise InputError(
                        f"{path} is cut short or not JSON: {exc.msg} at "
                        f"character {read - len(buffer) + exc.pos}"
                    ) from None

    def skip_nested() -> None:
        """Move past one value too deeply nested to decode, counting brackets."""
        nonlocal at
        depth, in_string, escaped = 0, False, False
        while True:
            for position in range(at, len(buffer)):
                char = buffer[position]
                if escaped:
                    escaped = False
                elif in_string:
                    escaped = char == "\\"
                    in_string = char != '"'
                elif char == '"':
                    in_string = True
                elif char in "[{":
                    depth += 1
                elif char in "]}":
                    depth -= 1
                    if depth == 0:
                        at = position + 1
                        return
            at = len(buffer)
            if not refill():
                raise InputError(f"{path} is cut short inside a value nested too deeply to read")

    skip(_WHITESPACE)
    if buffer[at : at + 1] != "{":
        raise InputError(f"{path} holds no JSON object; a Chrome trace is one")
    at += 1
    while True:
        skip(_SPACE)
        if buffer[at : at + 1] == "}":
            return
        key = value()
        skip(_COLON)
        if key != "traceEvents":
            others[str(key)] = value()
            continue
        skip(_WHITESPACE)
        if buffer[at : at + 1] != "[":
            raise InputError(f"{path}: traceEvents is not a list")
        at += 1
        while True:
            skip(_SPACE)
            if buffer[at : at + 1] == "]":
                at += 1
                break
            run, at = _whole_events(buffer, at)
            yield run if run is not None else [_event_of(value())]


def _with_counter_args(run: list[Any], text: str) -> list[Any] | None:
    """``run`` (decoded from ``text``) with each counter event as a `CounterEvent`;
    None where ``text`` cannot be decoded so (then it is read event by event)."""
    try:
        views = _COUNTER_ARGS_RUN.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    return [
        CounterEvent(event, _decoded(view.args)) if event.ph == "C" else event
        for event, view in zip(run, views, strict=True)
    ]


def _decoded(raw: msgspec.Raw) -> Any:
    """A counter event's args as JSON values (`TOO_DEEP` where nested too deeply)."""
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return TOO_DEEP


def _event_of(value: object) -> object:
    """A value decoded on its own as an `Event` where it is an object (its ``args`` left
    out where they are not one); anything else as it is."""
    if type(value) is not dict:
        return value
    args = value.get("args")
    fields = {f: value[f] for f in Event.__struct_fields__ if f in value and f != "args"}
    if value.get("ph") == "C":
        return CounterEvent(Event(**fields), args)
    known = {f.encode_name: f.name for f in msgspec.structs.fields(EventArgs)}
    return Event(
        **fields,
        args=EventArgs(**{known[k]: v for k, v in args.items() if k in known})
        if type(args) is dict
        else None,
    )


def _whole_events(buffer: str, at: int) -> tuple[list[Any] | None, int]:
    """The events from ``at`` to the last event boundary in ``buffer``, decoded in one
    call, and the position after them; (None, at) where there is no such run.

    A boundary is a ``}`` followed by a comma and a ``{``.  One inside an event (in a
    string, or between objects of a nested list) cuts that event short, and the run
    then fails to decode as an array: the caller falls back to one event at a time.
    """
    found = list(_BOUNDARY.finditer(buffer, max(at, len(buffer) - _TAIL)))
    last = found[-1] if found else None
    if last is None or last.start() <= at:
        return None, at
    text = "[" + buffer[at : last.start() + 1] + "]"
    try:
        run: list[Any] = _EVENT_RUN.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None, at
    if '"C"' in text and any(event.ph == "C" for event in run):
        counted = _with_counter_args(run, text)
        return (counted, last.start() + 1) if counted is not None else (None, at)
    return run, last.start() + 1


_INT_GETTERS = tuple((key, operator.attrgetter(key)) for key in _INT_ARGS)
_NUMBERS = frozenset({int, float})  # the types of JSON numbers (a bool is not one)


def _is_number(value: object) -> TypeGuard[int | float]:
    return type(value) in _NUMBERS


def _numbers(
    events: list[Event],
) -> tuple[list[Any], list[Any], dict[str, pa.Array | None], list[Any]]:
    """The events' ts and dur as given, their integer args as columns (`_integers`) and
    their copy bandwidths as given."""
    ts = [event.ts for event in events]
    dur = [event.dur for event in events]
    args = [event.args or _NO_ARGS for event in events]
    # one attribute at a time: faster than a tuple per event and a transpose
    integers = {key: _integers(list(map(getter, args))) for key, getter in _INT_GETTERS}
    return ts, dur, integers, [a.memory_bw_gbps for a in args]


def _integers(values: list[Any]) -> pa.Array | None:
    """JSON values as int64: a whole number as an integer, anything else (bool, text) as
    null; None when a number is fractional or out of int64's range (the caller finds its
    event: nothing is rounded)."""
    if float in set(map(type, values)) and any(
        type(value) is float and not value.is_integer() for value in values
    ):
        return None  # (Arrow would cut 12.5 to 12)
    try:
        return pa.array(values, pa.int64())  # fails on a bool or text: then value by value
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    try:
        return pa.array(
            [int(value) if type(value) in _NUMBERS else None for value in values], pa.int64()
        )
    except (OverflowError, pa.ArrowInvalid, ValueError):
        return None


def _identity(values: list[Any]) -> pa.Array:
    """Ids as given: integers as int64, anything else as its JSON text (NULL: none)."""
    if set(map(type, values)) <= {int, type(None)}:
        try:
            return pa.array(values, pa.int64())
        except OverflowError:
            pass
    return pa.array(
        [None if value is None else msgspec.json.encode(value).decode() for value in values],
        pa.string(),
    )


def _floats(values: list[Any]) -> pa.Array:
    """JSON values as float64: a number as it is, anything else (bool, text) as null."""
    if set(map(type, values)) <= _NUMBERS | {type(None)}:
        return pa.array(values, pa.float64())  # (Arrow would take a bool as 0 or 1)
    return pa.array([float(v) if _is_number(v) else None for v in values], pa.float64())


def _all_in_range(ts: list[Any], dur: list[Any]) -> bool:
    """Whether every ts and dur is a number the table holds as given (finite, within
    `EXACT_LIMIT` microseconds; dur >= 0)."""
    if not {*map(type, ts), *map(type, dur)} <= _NUMBERS:
        return False
    starts, lengths = np.asarray(ts, dtype=np.float64), np.asarray(dur, dtype=np.float64)
    return bool(
        np.all(np.abs(starts) <= EXACT_LIMIT)
        and np.all(lengths >= 0)
        and np.all(lengths <= EXACT_LIMIT)
    )


def _raw(event: Event) -> str:
    """The event's kept fields as JSON, for the quarantine."""
    return msgspec.json.encode(event).decode()[:2000]


def is_one_process(head: bytes) -> bool:
    """Whether a trace's ``distributedInfo`` (Kineto writes it before the events) makes
    it its job's only process: no ``world_size`` above 1 and no ``rank`` above 0."""
    match = _DISTRIBUTED_INFO.search(head)
    try:
        info = json.loads(match.group(1)) if match is not None else {}
    except ValueError:
        info = {}
    world_size, rank = info.get("world_size"), info.get("rank")
    several = type(world_size) is int and world_size > 1
    return not several and not (type(rank) is int and rank > 0)


def trace_file_stem(path: Path) -> str:
    """A profiler trace's file name without ``.pt``, ``.trace``, ``.json`` and ``.gz``."""
    stem = path.name
    for suffix in (".gz", ".json", ".trace", ".pt"):
        stem = stem.removesuffix(suffix)
    return printable(stem or path.name)


def _counter_raw(event: Event, args: Any) -> str:
    """A counter event as JSON, for the quarantine."""
    fields = {f: getattr(event, f) for f in ("ph", "cat", "name", "pid", "tid", "ts")}
    shown = "(nested too deeply)" if args is TOO_DEEP else args
    return json.dumps({**fields, "args": shown}, default=str)[:2000]


class TimelineFamily:
    """PyTorch profiler (Kineto) traces, one rank each, into ``timeline_events`` and
    (their counter events) ``timeline_counters``."""

    name = "timeline"
    reads = "Kineto profiler traces (traceEvents)"
    tables = (TIMELINE_EVENTS.name, TIMELINE_COUNTERS.name)
    reads_only_record_keys = True

    def recognise(self, probe: Probe) -> str | None:
        head = probe.head
        if probe.is_json_document and (b'"traceEvents"' in head or b'"schemaVersion"' in head):
            return "kineto"
        return None

    def forced_format(self, probe: Probe) -> str:
        if self.recognise(probe) is None:
            raise InputError(f"{probe.path} is not a Chrome trace: it has no traceEvents")
        return "kineto"

    def run_name(self, probe: Probe, fmt: str, options: IngestOptions) -> str:
        """``--run-name``, else the file's name for a trace named on the command line
        that is one job's only process, else the folder's (the ranks of one job, and a
        run folder's trace and counters, join one run)."""
        if options.run_name:
            return options.run_name
        if probe.source.named and is_one_process(probe.head):
            return trace_file_stem(probe.path)
        return probe.source.default_run_name()

    def read(
        self, probe: Probe, fmt: str, sink: FileSink, options: IngestOptions, advance: Advance
    ) -> FileRows:
        reader = KinetoReader(probe.path)
        events = sink.open_file(TIMELINE_EVENTS.name)
        counters = sink.open_file(TIMELINE_COUNTERS.name)
        rows = 0
        for batch in reader.batches(None if is_gzip(probe.path) else advance):
            rows += events.append(batch)
            rows += sum(counters.append(table) for table in reader.take_counters())
        rows += sum(counters.append(table) for table in reader.take_counters())
        events.close()
        counters.close()
        header = reader.header
        return FileRows(
            "timeline",
            rows=rows,
            rejected=reader.rejected,
            skipped=Counter({REPEATED: reader.repeated} if reader.repeated else {}),
            config=header.run_config,
            rank=header.rank,
            world_size=header.run_config["distributed_info"].get("world_size"),
        )


TIMELINE = TimelineFamily()

"""The SQL functions behind the analyses: one entry each, from which everything else about
a function is derived.

An entry names the function, its arguments (name and DuckDB type), the STRUCT of the rows
it returns (`kvtrace.analysis._columns`), the library files whose views it reads when it
runs, the analysis that computes its rows (``module:function``, called with a cursor and
the constant arguments, loaded on the first call) and what its plain-shell stand-in says.
`kvtrace.analysis.functions.register` installs them; `kvtrace.analysis.open_analysis_connection`
binds what they read; and the part of ``kvtrace/sql/queries/udf_fallback.sql`` that
defines them for a plain ``duckdb`` shell is `fallback_sql` (written by
``python -m kvtrace.analysis.function_specs``; a test holds the file equal to it).

This module loads no compiled kernel, no analysis and no Arrow: a connection bound for a
statement learns what its functions read from it alone.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "FALLBACK_BEGIN",
    "FALLBACK_END",
    "FUNCTIONS",
    "AnalysisFunction",
    "fallback_file",
    "fallback_sql",
    "reads",
    "with_fallback",
]

_SIMULATES = "runs cache simulations"
_KERNELS = "Cache simulation needs kvtrace's compiled kernels"


@dataclass(frozen=True)
class AnalysisFunction:
    """One SQL function of the analysis layer."""

    name: str
    arguments: tuple[tuple[str, str], ...]  # (name, DuckDB type), in order
    result_name: str  # its row's STRUCT in `kvtrace.analysis._columns` (a list of them)
    reads: tuple[str, ...]  # library files whose views it reads when it runs
    implementation: str  # "module:function": rows of (cursor, *constant arguments)
    macro: str  # the library macro that calls it (named by the shell stand-in's error)
    does: str  # what it does in Python, for that error
    why: str  # why a plain shell cannot, for the stand-in's comment

    @property
    def result(self) -> pa.StructType:
        """The STRUCT of one row (pyarrow loads here, not when a connection is bound)."""
        from kvtrace.analysis import _columns

        struct: pa.StructType = getattr(_columns, self.result_name)
        return struct

    @property
    def argument_types(self) -> list[Any]:  # DuckDB's type names, as create_function takes
        return [kind for _, kind in self.arguments]


_CURVE = (("policy", "VARCHAR"), ("capacities", "BIGINT[]"), ("semantics", "VARCHAR"))
_BUDGET = (
    ("warmup", "DOUBLE"),
    ("capacity_bytes", "BIGINT[]"),
    ("bytes_per_token", "DOUBLE"),
    ("model", "VARCHAR"),
)
_CALLS = "kvtrace.analysis._function_calls"
_ROUTING = (
    ("workers", "BIGINT"),
    ("capacity_blocks", "BIGINT"),
    ("policy", "VARCHAR"),
    ("cache", "VARCHAR"),
    ("capacity_bytes", "BIGINT"),
    ("bytes_per_token", "DOUBLE"),
    ("model", "VARCHAR"),
    ("tpot_ms", "DOUBLE"),
    ("threshold", "DOUBLE"),
    ("overlap_weight", "DOUBLE"),
)

FUNCTIONS: tuple[AnalysisFunction, ...] = (
    AnalysisFunction(
        "kvtrace_hit_curve",
        (
            ("bs", "BIGINT"),
            ("policy", "VARCHAR"),
            ("granularity", "VARCHAR"),
            ("scope", "VARCHAR"),
            ("capacities", "BIGINT[]"),
            ("sharing", "VARCHAR"),
            ("sample", "DOUBLE"),
        ),
        "HIT_CURVE",
        ("dsa_access.sql", "workload.sql"),
        f"{_CALLS}:hit_curve",
        "dsa_hit_curve",
        _SIMULATES,
        _KERNELS,
    ),
    AnalysisFunction(
        "kvtrace_reuse",
        (
            ("bs", "BIGINT"),
            ("granularity", "VARCHAR"),
            ("scope", "VARCHAR"),
            ("sharing", "VARCHAR"),
        ),
        "REUSE",
        ("dsa_access.sql", "workload.sql"),
        f"{_CALLS}:reuse",
        "dsa_reuse",
        _SIMULATES,
        "Stack distances need kvtrace's compiled kernels",
    ),
    AnalysisFunction(
        "kvtrace_prefix_hit_curve",
        (*_CURVE, ("weight", "VARCHAR"), *_BUDGET),
        "PREFIX_HIT_CURVE",
        ("workload.sql",),
        f"{_CALLS}:prefix_hit_curve",
        "workload_prefix_hit_curve",
        _SIMULATES,
        _KERNELS,
    ),
    AnalysisFunction(
        "kvtrace_prefix_requests",
        (*_CURVE, *_BUDGET, ("prefill_tok_s", "DOUBLE"), ("cost_run", "VARCHAR")),
        "PREFIX_REQUESTS",
        ("workload.sql", "dsa_steps.sql", "timing.sql"),
        f"{_CALLS}:prefix_requests",
        "workload_prefix_requests",
        _SIMULATES,
        _KERNELS,
    ),
    AnalysisFunction(
        "kvtrace_routing",
        _ROUTING,
        "ROUTING",
        ("workload.sql",),
        "kvtrace.analysis.routing:routing_rows",
        "workload_routing",
        _SIMULATES,
        _KERNELS,
    ),
    AnalysisFunction(
        "kvtrace_routing_requests",
        _ROUTING,
        "ROUTING_REQUESTS",
        ("workload.sql",),
        "kvtrace.analysis.routing:routing_request_rows",
        "workload_routing_requests",
        _SIMULATES,
        _KERNELS,
    ),
    AnalysisFunction(
        "kvtrace_kv_routing_score",
        (("run_id", "VARCHAR"),),
        "KV_ROUTING_SCORE",
        ("kv_events.sql",),
        "kvtrace.analysis.kv_routing:kv_routing_rows",
        "kv_routing_score",
        "replays the caches of the workers",
        "The workers' caches are replayed in Python",
    ),
    AnalysisFunction(
        "kvtrace_cost_model",
        (("source", "VARCHAR"),),
        "COST_MODEL",
        ("timing.sql", "dsa_steps.sql"),
        "kvtrace.analysis.cost_model:cost_model_rows",
        "timing_cost_model",
        "fits",
        "Least-squares fitting runs in Python",
    ),
    AnalysisFunction(
        "kvtrace_serving_capacity",
        (
            ("run", "VARCHAR"),
            ("ttft_slo_ms", "DOUBLE"),
            ("tpot_slo_ms", "DOUBLE"),
            ("percentile", "DOUBLE"),
            ("cost_run", "VARCHAR"),
            ("model", "VARCHAR"),
            ("bytes_per_token", "DOUBLE"),
            ("gpu_memory_gib", "DOUBLE"),
            ("model_weights_gib", "DOUBLE"),
            ("max_batch_size", "BIGINT"),
            ("max_batch_tokens", "BIGINT"),
            ("requests", "BIGINT"),
            ("arrivals", "VARCHAR"),
            ("seed", "BIGINT"),
        ),
        "SERVING_CAPACITY",
        ("timing.sql", "serving_bench.sql", "workload.sql", "runs.sql"),
        "kvtrace.analysis.serving_capacity:serving_capacity_rows",
        "serving_capacity",
        "simulates a server",
        "The serving simulation runs in Python",
    ),
    AnalysisFunction(
        "kvtrace_kv_cache_fidelity",
        (("policy", "VARCHAR"), ("capacity_blocks", "BIGINT"), ("bucket_s", "DOUBLE")),
        "KV_CACHE_FIDELITY",
        ("kv_events.sql",),
        "kvtrace.analysis.kv_cache_fidelity:kv_cache_fidelity_rows",
        "kv_cache_fidelity",
        _SIMULATES,
        _KERNELS,
    ),
    AnalysisFunction(
        "kvtrace_kernel_sequences",
        (("operator", "VARCHAR"), ("min_pattern_len", "BIGINT"), ("top_k", "BIGINT")),
        "KERNEL_SEQUENCES",
        ("timeline.sql",),
        "kvtrace.analysis.kernel_sequences:kernel_sequence_rows",
        "timeline_kernel_sequences",
        "builds call stacks",
        "Call stacks are built in Python",
    ),
    AnalysisFunction(
        "kvtrace_critical_path",
        (("annotation", "VARCHAR"), ("instance", "BIGINT"), ("definitions", "VARCHAR")),
        "CRITICAL_PATH",
        ("timeline.sql",),
        "kvtrace.analysis.critical_path:critical_path_rows",
        "timeline_critical_path",
        "searches a graph",
        "The critical path is a graph search in Python",
    ),
)


def reads() -> dict[str, tuple[str, ...]]:
    """Per function: the library files whose views it reads when it runs (a connection
    bound for one statement binds them too)."""
    return {function.name: function.reads for function in FUNCTIONS}


# -- the plain-shell stand-ins in udf_fallback.sql ---------------------------------------------

FALLBACK_BEGIN = "-- >>> generated from kvtrace/analysis/function_specs.py: do not edit by hand"
FALLBACK_END = "-- <<< end of generated macros"
_WIDTH = 99


def _wrapped(words: list[str], first: str, indent: str, last: str) -> list[str]:
    """``first`` then ``words`` joined by ", ", wrapped at the width, ``last`` appended."""
    lines, line = [], first
    for index, word in enumerate(words):
        piece = word + (", " if index < len(words) - 1 else last)
        if len(line) + len(piece.rstrip()) > _WIDTH and line.strip():
            lines.append(line.rstrip())
            line = indent
        line += piece
    lines.append(line.rstrip())
    return lines


def _stand_in(function: AnalysisFunction) -> str:
    """The macro a plain shell gets for ``function``: an error of the same row type."""
    names = [name for name, _ in function.arguments]
    head = f"CREATE MACRO {function.name}("
    message = (
        f"'{function.macro} {function.does} in Python: use \"kvtrace sql\" or kvtrace.connect()'"
    )
    from kvtrace.sql.functions import duckdb_type

    fields = duckdb_type(function.result).removeprefix("STRUCT(").removesuffix(")").split(", ")
    return "\n".join(
        [
            f"-- @macro {function.name}({', '.join(names)})",
            f"-- {function.why}: not available in a plain shell.",
            *_wrapped(names, head, " " * len(head), ") AS"),
            f"    CAST(error({message})",
            *_wrapped(fields, "         AS STRUCT(", " " * 19, ")[]);"),
        ]
    )


def fallback_sql() -> str:
    """The generated part of ``udf_fallback.sql``, its markers included."""
    macros = "\n\n".join(_stand_in(function) for function in FUNCTIONS)
    return f"{FALLBACK_BEGIN}\n\n{macros}\n\n{FALLBACK_END}\n"


def with_fallback(text: str) -> str:
    """``text`` (the file) with its generated part replaced by `fallback_sql`."""
    start, end = text.index(FALLBACK_BEGIN), text.index(FALLBACK_END) + len(FALLBACK_END)
    return text[:start] + fallback_sql().rstrip("\n") + text[end:]


def fallback_file() -> Path:
    """Where ``udf_fallback.sql`` lives in the source tree."""
    import kvtrace.sql

    return Path(kvtrace.sql.__file__).parent / "queries" / "udf_fallback.sql"


if __name__ == "__main__":  # python -m kvtrace.analysis.function_specs: rewrite the file
    path = fallback_file()
    path.write_text(with_fallback(path.read_text()))
    sys.stdout.write(f"wrote {path}\n")

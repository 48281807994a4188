"""Which library files each analysis function reads when it runs: known without loading
the functions (`kvtrace.analysis.functions`), so a connection bound for one statement
binds those files too."""

READS: dict[str, tuple[str, ...]] = {
    "kvtrace_hit_curve": ("dsa_access.sql", "workload.sql"),
    "kvtrace_reuse": ("dsa_access.sql", "workload.sql"),
    "kvtrace_prefix_hit_curve": ("workload.sql",),
    "kvtrace_prefix_requests": ("workload.sql", "dsa_steps.sql", "timings.sql"),
    "kvtrace_cost_model": ("timings.sql", "dsa_steps.sql"),
    "kvtrace_kv_cache_fidelity": ("kv_events.sql",),
    "kvtrace_kernel_sequences": ("timeline.sql",),
    "kvtrace_critical_path": ("timeline.sql",),
}
"""The functions `kvtrace.analysis.functions.register` installs, and the library files
whose views each reads when it runs (a connection bound for one statement binds them
too)."""

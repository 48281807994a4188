"""Collectors: write traces straight into the warehouse while a system runs."""

__all__ = [
    "collect_options",
    "datasets",
    "dsa_ref",
    "dsa_run",
    "dsa_tracer",
    "kv_event_bounds",
    "kv_event_subscriber",
    "kv_tiers",
    "models",
    "pool_poller",
]

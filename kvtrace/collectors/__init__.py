"""Collectors: write traces straight into the warehouse while a system runs."""

__all__ = [
    "collect_options",
    "counters",
    "datasets",
    "dsa_ref",
    "dsa_run",
    "dsa_tracer",
    "engine_metric_maps",
    "kv_event_bounds",
    "kv_event_subscriber",
    "kv_tiers",
    "metrics_scraper",
    "models",
    "pool_poller",
    "tracing",
]

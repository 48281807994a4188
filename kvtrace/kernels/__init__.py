"""Numeric kernels: leaf code over NumPy arrays that the writers and the views both call.

Nothing here imports the warehouse, DuckDB or any reader.  `cache_sim` simulates caches
over streams of integer item keys (LRU stack distances, exclusive tiers), `capacity_sim`
one capacity of FIFO or Belady's OPT, `prefix_sim` and `radix_cache` prefix caches.
"""

__all__ = [
    "access_items",
    "block_keys",
    "block_stats",
    "cache_sim",
    "capacity_sim",
    "json_lists",
    "json_records",
    "list_checks",
    "offset_counts",
    "prefix_sim",
    "radix_cache",
    "sampling",
]

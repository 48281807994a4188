"""Running kvtrace's heavy work on a Ray cluster (``--engine ray``).

Each task runs the same code as one machine does (an ingest of one file; the cache
simulation of a share of a run's requests, through DuckDB on a pinned warehouse
version), and the driver merges the partial results exactly: reports in file order,
hit counts and per-step tier counts summed in the order one machine produces them, so
the answer is the single-machine one, bit for bit.  Workers must reach the warehouse:
the same disk, or an object store.
"""

__all__ = ["ray_engine"]

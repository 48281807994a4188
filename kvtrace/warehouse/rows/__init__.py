"""Row builders shared by the readers (`kvtrace.ingest`) and the collectors.

Each module turns one kind of record into the rows of its tables, with its type checks:
DSA top-k rows (`dsa_writer`, over `dsa_columns`, `dsa_checks` and `dsa_histograms`), pool
snapshots and request metrics (`serving`), KV-cache events and their epochs (`kv_events`,
`kv_event_epochs`), RULER predictions (`eval`), and every family's ``runs`` and quarantine
rows (`bookkeeping`, `rejects`).  They use the storage core
(`kvtrace.warehouse`), never the reverse.
"""

__all__ = [
    "bookkeeping",
    "dsa_checks",
    "dsa_columns",
    "dsa_histograms",
    "dsa_writer",
    "eval",
    "kv_event_epochs",
    "kv_events",
    "rejects",
    "serving",
]

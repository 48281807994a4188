"""Operations on a whole warehouse: maintenance, integrity checks, repair and migration.

`maintenance` compacts (optimize) and frees old versions (vacuum); `integrity` is
``kvtrace check``, over `file_check` and `lost_rows`; `repair` mends what check finds,
retracting damaged commits (`retraction`, `compacted`); `migrate` moves a warehouse to
the current layout.  They use the storage core (`kvtrace.warehouse`), never the reverse.
"""

__all__ = ["integrity", "maintenance", "migrate", "repair"]

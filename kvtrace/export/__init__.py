"""Exports of what a warehouse holds to other tools' formats.

`perfetto` writes Chrome trace / Perfetto JSON of every row that has a time; `sources`
is the registry of what goes in (the command line's choices and help derive from it),
light to import.
"""

__all__ = ["perfetto", "sources", "trace_json"]

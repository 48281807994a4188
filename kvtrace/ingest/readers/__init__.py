"""The family readers: one module per trace family, each a `kvtrace.ingest.family.Family`.

The machinery they share (probing, chunked line reading, record keys, the commit path)
lives one level up in `kvtrace.ingest`; `kvtrace.ingest.families` lists the readers in the
order a file is offered to them.
"""

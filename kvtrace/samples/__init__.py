"""Small real and example traces that ship with kvtrace, one of each family beyond the
demo's DSA run, so that every guide's first example runs on a fresh machine.

``kvtrace samples FOLDER`` writes them out (`sample` gives each file's bytes); their
sources and licenses are in ``README.md`` beside them, which is written too.
"""

from __future__ import annotations

from importlib import resources

# file -> what it is, as `kvtrace samples` lists it
SAMPLES = {
    "mooncake_conversation_1k.jsonl": "workload: the first 1,000 requests of Mooncake's "
    "conversation trace (arrivals, lengths, prefix-block hashes)",
    "kv_events_mooncake_lru600.jsonl": "kv-events: what a 600-block LRU pool publishes "
    "for the first 200 of those requests (generated)",
    "kineto_sampled_rank0.json.gz": "timeline: a real PyTorch profiler trace "
    "(HTA's sampled rank 0)",
    "exp_sample_pool_timeseries.jsonl": "serving: KV pool snapshots of 4 workers "
    "(generated, in the seed's format)",
    "exp_sample_metrics.jsonl": "serving: 100 requests of that experiment (generated)",
}
README = "README.md"


def sample(name: str) -> bytes:
    """The bytes of the shipped file ``name`` (a key of `SAMPLES`, or `README`)."""
    return resources.files(__package__).joinpath(name).read_bytes()

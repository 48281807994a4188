"""Synthetic traces, labelled so, for the demo, tests and benchmarks: DSA top-k selections
(`dsa`) and profiler timelines with overlaps chosen in advance (`timeline`)."""

from kvtrace.synthetic.dsa import dsa_selection, write_seed_trace

__all__ = ["dsa_selection", "write_seed_trace"]

"""The what-if benchmarks' workload: requests that share documents, traced in batches.

``requests`` requests decode ``steps`` steps each, ``batch`` at a time (a continuous
batch: the rows of one step share its batched step counter and time).  Request r reads
document r % ``documents``: its prompt is that document's ``shared`` tokens, then
``prompt - shared`` tokens of its own, so requests of one document hold the same first
blocks and a content-addressed pool can share them.  The selections are
`kvtrace.synthetic.dsa_selection` (16 layers, top-2048: recent tokens, the first ones,
and salient spans of the prompt); the generated tokens are drawn at random.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvtrace.collectors.dsa_tracer import DsaTracer
from kvtrace.synthetic import dsa_selection
from kvtrace.warehouse import Warehouse

BLOCK_SIZE = 64
TOPK = 2048


def prompt_of(request: int, prompt: int, shared: int, documents: int) -> list[int]:
    """Token ids of a request's prompt: its document's, then its own."""
    document = [1_000_000 * (1 + request % documents) + i for i in range(shared)]
    own = [500_000_000 + 100_000 * request + i for i in range(prompt - shared)]
    return document + own


def trace(
    root: Path,
    *,
    requests: int = 32,
    steps: int = 256,
    layers: int = 16,
    prompt: int = 16_000,
    shared: int = 12_288,
    documents: int = 4,
    batch: int = 8,
    run_name: str = "bench-whatif",
) -> Warehouse:
    """Trace the workload into a new warehouse at ``root``."""
    warehouse = Warehouse(root, create=True)
    with DsaTracer(
        warehouse,
        run_name=run_name,
        dataset="synthetic-bench",
        block_sizes=(BLOCK_SIZE,),
        topk=TOPK,
    ) as tracer:
        for first in range(0, requests, batch):
            members = list(range(first, min(first + batch, requests)))
            rngs = {r: np.random.default_rng(r) for r in members}
            segments = {
                r: [
                    (int(rngs[r].integers(0, prompt)), int(rngs[r].integers(16, 200)))
                    for _ in range(4)
                ]
                for r in members
            }
            for r in members:
                tracer.begin_request(r, prompt_of(r, prompt, shared, documents))
            for step in range(prompt, prompt + steps):
                with tracer.step({r: step for r in members}):
                    for layer in range(layers):
                        picked = np.stack(
                            [
                                dsa_selection(rngs[r], step + 1, TOPK, layer, segments[r])
                                for r in members
                            ]
                        )
                        tracer.record_topk(layer, picked)
            for r in members:
                generated = rngs[r].integers(0, 100_000, size=steps).tolist()
                tracer.end_request(r, new_tokens=steps, token_ids=generated)
    return warehouse


if __name__ == "__main__":
    import sys
    import time

    start = time.perf_counter()
    trace(Path(sys.argv[1]))
    print(f"traced in {time.perf_counter() - start:.0f} s")

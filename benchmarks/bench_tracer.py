"""Tracer overhead: dsa-ref decode untraced, with kvtrace's tracer, and with a naive tracer.

kvtrace's tracer is driven through its public API, as an instrumented engine drives it:
``kvtrace.trace`` opens it, each step is framed by ``tracer.step`` and every layer
reports with ``kvtrace.record_topk``.

    python benchmarks/bench_tracer.py --layers 8 --prompt 8000 --steps 48 [--device cuda]
                                      [--json PATH]

The naive tracer does what the seed's instrumentation did per record: ``.tolist()``,
statistics in Python, ``json.dumps`` and a synchronous line written to a file.  All three
runs decode the same prompt with the same model in one process, interleaved for
``--rounds`` rounds (untraced, kvtrace, naive, untraced, ...), reported as medians;
``--json`` also writes every round's seconds (`bench_commands.py --tracer` reads them).
``--device cuda`` decodes on a GPU; each step's greedy token is read back on the host, as
a serving loop reads it, so the step's time includes its device work.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

import kvtrace
from kvtrace.collectors.dsa_ref import DsaRef, DsaRefConfig
from kvtrace.collectors.models import torch_device


class NaiveTracer:
    """The seed's way: one JSON line per (step, layer), written synchronously."""

    def __init__(self, path: Path, block_size: int = 64) -> None:
        self.out = open(path, "w")  # noqa: SIM115 - closed by close()
        self.block_size = block_size
        self.start_pos = 0
        self.records = 0

    def step(self, positions):
        tracer = self

        class _Step:
            def __enter__(self):
                tracer.start_pos = next(iter(positions.values()))

            def __exit__(self, *exc):
                return False

        return _Step()

    def record_topk(self, layer_id, indices, scores=None):
        positions = indices.tolist()
        seq_len = self.start_pos + 1
        offsets = sorted(seq_len - 1 - p for p in positions)
        blocks = sorted({p // self.block_size for p in positions})
        per_block = [sum(1 for p in positions if p // self.block_size == b) for b in blocks]
        values = scores.tolist() if scores is not None else []
        record = {
            "event": "dsa_topk",
            "request_id": 0,
            "layer_id": layer_id,
            "step_idx": self.start_pos,
            "seq_len_current": seq_len,
            "selected_token_pos": positions,
            "unique_token_pos_count": len(positions),
            "offset_min": offsets[0],
            "offset_p50": statistics.median(offsets),
            "offset_max": offsets[-1],
            "block_size_tokens": self.block_size,
            "selected_block_ids": blocks,
            "unique_blocks": len(blocks),
            "tokens_per_touched_block": {"mean": statistics.mean(per_block)},
            "scores_stats": {
                "min": min(values),
                "mean": statistics.mean(values),
                "max": max(values),
            }
            if values
            else None,
        }
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()
        self.records += 1

    def close(self):
        self.out.close()


@torch.inference_mode()
def decode(model: DsaRef, prompt: list[int], steps: int, tracer, reporter=None) -> float:
    """Seconds of ``steps`` decode steps after an untimed prefill (greedy, as generate);
    each layer's top-k goes to ``reporter.record_topk`` (default: the tracer's own)."""
    cache = model.new_cache(1, len(prompt) + steps + 1)
    logits = model.prefill(prompt, cache)[None]
    rows = torch.tensor([0])
    position = len(prompt)
    synchronize(model.device)
    started = time.perf_counter()
    for _ in range(steps):
        token = [int(logits[-1].argmax())]
        if tracer is None:
            logits = model.decode_step(token, rows, torch.tensor([position]), cache)
        else:
            with tracer.step({0: position}):
                logits = model.decode_step(
                    token, rows, torch.tensor([position]), cache, reporter or tracer
                )
        position += 1
    synchronize(model.device)
    return time.perf_counter() - started


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def closing(tracer) -> float:
    started = time.perf_counter()
    tracer.close()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=8000)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--topk", type=int, default=2048)
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="Rounds; each runs untraced, kvtrace and naive in turn",
    )
    parser.add_argument(
        "--no-naive", action="store_true", help="leave the naive tracer out (more rounds a minute)"
    )
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1")
    parser.add_argument("--json", type=Path, help="write each variant's seconds per round here")
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    config = DsaRefConfig(
        dim=args.dim,
        n_layers=args.layers,
        index_topk=args.topk,
        max_seq_len=args.prompt + args.steps + 2,
    )
    model = DsaRef(config, seed=0).to(torch_device(args.device))
    prompt = [(i * 7919) % 256 for i in range(args.prompt)]
    work = Path(tempfile.mkdtemp(prefix="kvtrace-tracer-"))
    tracers = ("kvtrace",) if args.no_naive else ("kvtrace", "naive")
    times: dict[str, list[float]] = {name: [] for name in ("untraced", *tracers)}
    flush = []
    for run in range(args.rounds):  # interleaved: a noisy stretch hits every variant
        times["untraced"].append(decode(model, prompt, args.steps, None))
        tracer = kvtrace.trace(
            work / f"wh{run}", run_name=f"bench-{run}", dataset="bench", topk=args.topk
        )
        tracer.begin_request(0, prompt)
        # the module's record_topk, as an engine's indexer calls it
        times["kvtrace"].append(decode(model, prompt, args.steps, tracer, reporter=kvtrace))
        flush.append(closing(tracer))
        if "naive" in tracers:
            naive = NaiveTracer(work / f"naive{run}.jsonl")
            times["naive"].append(decode(model, prompt, args.steps, naive))
            naive.close()
    shutil.rmtree(work)
    records = args.steps * args.layers
    if args.json is not None:
        figures = {"records": records, "device": device_name(model.device)}
        args.json.write_text(json.dumps({**figures, **times}))
    median = {name: statistics.median(values) for name, values in times.items()}
    # each round's ratio to the untraced decode of the same round, then their median
    ratios = {
        name: sorted(t / u for t, u in zip(times[name], times["untraced"], strict=True))
        for name in tracers
    }
    per_record = {name: (median[name] - median["untraced"]) / records * 1e6 for name in tracers}
    print(
        f"dsa-ref on {device_name(model.device)}, {args.layers} layers, dim {args.dim}, "
        f"top-k {args.topk}, prompt "
        f"{args.prompt} tokens, {args.steps} decode steps ({records} records), "
        f"{args.rounds} interleaved rounds, median (min-max), prefill untimed\n"
    )
    print("| decode | seconds | vs untraced (same round) | added per record |")
    print("|---|---|---|---|")
    for name in times:
        spread = f"{median[name]:.3f} ({min(times[name]):.3f}-{max(times[name]):.3f})"
        if name == "untraced":
            print(f"| {name} | {spread} | 1.000x | |")
            continue
        ratio = (
            f"{statistics.median(ratios[name]):.3f}x ({ratios[name][0]:.3f}-{ratios[name][-1]:.3f})"
        )
        print(f"| {name} | {spread} | {ratio} | {per_record[name]:.0f} us |")
    overhead = 100 * (statistics.median(ratios["kvtrace"]) - 1)
    relative = (
        f"1/{per_record['naive'] / per_record['kvtrace']:.1f} of the naive tracer's"
        if per_record["kvtrace"] > 0 and "naive" in per_record
        else f"{per_record['kvtrace']:.0f} us"
    )
    print(
        f"\nkvtrace adds {overhead:.1f} % to decode (median of the rounds' ratios); per "
        f"record it costs {relative}; its final flush took {statistics.median(flush):.2f} s"
    )


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's thread count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"the CPU ({torch.get_num_threads()} threads)"


if __name__ == "__main__":
    main()

"""The instrumentation guide's lines, taken from the page, run in a pure-torch stand-in
of DeepSeek-V3.2-Exp's inference demo; the warehouse holds what the stand-in selected."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from kvtrace import connect
from kvtrace.warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "instrument.md"
STANDIN = Path(__file__).parent / "standin_dsv32"
FILES = {"inference/model.py": "model.py", "inference/generate.py": "generate.py"}
_PATCH = re.compile(
    r"^\*\*(?P<file>[\w./]+)\*\*, (?P<where>after|before|in place of) the line "
    r"`(?P<anchor>[^`]+)`:\n\n```python\n(?P<code>.*?)^```",
    re.MULTILINE | re.DOTALL,
)

DRIVER = """
import pickle, sys
import model, generate
selections = []  # (layer, start_pos, topk_indices) of every indexer call
built = model.Transformer.__init__
def with_hooks(self, args):
    built(self, args)
    for layer_id, block in enumerate(self.layers):
        block.attn.indexer.register_forward_hook(
            lambda module, inputs, out, layer_id=layer_id:
                selections.append((layer_id, inputs[2], out.clone().numpy()))
        )
model.Transformer.__init__ = with_hooks
generate.main(sys.argv[1], int(sys.argv[2]))
with open(sys.argv[3], "wb") as out:
    pickle.dump(selections, out)
"""


def guide_patches() -> list[tuple[str, str, str, str]]:
    """(file, where, anchor, code) of every demo patch the guide gives, in page order."""
    found = [
        (m["file"], m["where"], m["anchor"], m["code"]) for m in _PATCH.finditer(GUIDE.read_text())
    ]
    return [patch for patch in found if patch[0] in FILES]


def patched(source: str, patches: list[tuple[str, str, str, str]]) -> str:
    """``source`` with the patches applied at their anchors (each a unique line)."""
    lines = source.splitlines(keepends=True)
    for _, where, anchor, code in patches:
        at = [i for i, line in enumerate(lines) if line.strip() == anchor]
        assert len(at) == 1, f"the anchor {anchor!r} is not one line of the stand-in"
        i = at[0]
        added = code.splitlines(keepends=True)
        if where == "after":
            lines[i + 1 : i + 1] = added
        elif where == "before":
            lines[i:i] = added
        else:
            lines[i : i + 1] = added
    return "".join(lines)


def test_the_guide_names_every_demo_file_s_lines():
    patches = guide_patches()
    assert [(f, where) for f, where, _, _ in patches] == [
        ("inference/model.py", "after"),
        ("inference/model.py", "after"),
        ("inference/model.py", "after"),
        ("inference/generate.py", "after"),
        ("inference/generate.py", "after"),
        ("inference/generate.py", "after"),
        ("inference/generate.py", "in place of"),
        ("inference/generate.py", "before"),
    ]


def _expected(selections, prompt_lens):
    """Decode rows and prefill chunks, by brute force over what each indexer returned."""
    decode, chunks = {}, {}
    for layer, start, out in selections:
        batch, tokens, _ = out.shape
        for row in range(batch):
            for i in range(tokens):
                query = start + i
                picks = out[row, i].tolist()
                if tokens == 1 and query >= prompt_lens[row]:
                    decode[(row, query, layer)] = sorted(set(picks))
                    continue
                counts = chunks.setdefault((row, start, layer), {})
                for p in picks:
                    if 0 <= p <= query:
                        counts[p] = counts.get(p, 0) + 1
    return decode, {
        key: (sorted(counts), [counts[p] for p in sorted(counts)]) for key, counts in chunks.items()
    }


def _run_patched_standin(tmp_path, prompts):
    """Run the stand-in with the guide's lines; its completions and selections."""
    demo = tmp_path / "inference"
    demo.mkdir()
    patches = guide_patches()
    for name, local in FILES.items():
        source = (STANDIN / local).read_text()
        (demo / local).write_text(patched(source, [p for p in patches if p[0] == name]))
    (tmp_path / "prompts.json").write_text(json.dumps(prompts))
    (demo / "driver.py").write_text(DRIVER)
    env = {**os.environ, "KVTRACE_WAREHOUSE": str(tmp_path / "wh"), "KVTRACE_RUN": "standin"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "driver.py", str(tmp_path / "prompts.json"), "6", "selections.pkl"],
        cwd=demo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    selections = pickle.loads((demo / "selections.pkl").read_bytes())
    shutil.rmtree(demo)
    return json.loads(done.stdout.splitlines()[-1]), selections


def test_the_guide_s_lines_trace_the_stand_in_s_selections(tmp_path):
    rng = np.random.default_rng(5)
    prompts = [rng.integers(0, 97, size=n).tolist() for n in (9, 12, 15)]
    completions, selections = _run_patched_standin(tmp_path, prompts)
    location = tmp_path / "wh"
    decode, chunks = _expected(selections, [len(p) for p in prompts])
    con = connect(Warehouse(str(location)))
    rows = con.execute(
        "SELECT request_id, step_idx, layer_id, selected_pos, topk, score_min IS NOT NULL "
        "FROM dsa_steps"
    ).fetchall()
    assert {(r, s, layer): pos for r, s, layer, pos, _, _ in rows} == decode
    assert {(topk, scored) for *_, topk, scored in rows} == {(6, True)}
    prefill = con.execute(
        "SELECT request_id, query_start, layer_id, selected_pos, select_count FROM dsa_prefill"
    ).fetchall()
    assert {(r, s, layer): (pos, n) for r, s, layer, pos, n in prefill} == chunks
    requests = con.execute(
        "SELECT request_id, prompt_tokens, new_tokens, status FROM requests ORDER BY 1"
    ).fetchall()
    assert requests == [
        (i, len(p), len(c), "ok") for i, (p, c) in enumerate(zip(prompts, completions, strict=True))
    ]
    assert con.execute("SELECT run_name, rank, world_size FROM runs").fetchall() == [
        ("standin", 0, 1)
    ]

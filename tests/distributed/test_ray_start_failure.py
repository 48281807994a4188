"""A Ray cluster that will not start is one sentence naming the cause and what to do,
not an unexpected failure.  ``ray.init`` is made to raise what Ray raises (no cluster is
started): ray 2.60's ray/_private/node.py raises a bare ``Exception("The current node
timed out during startup. ...")`` when its raylet does not register within 30 s, and
ray/_private/services.py a ``TimeoutError`` while waiting for the node."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_kvtrace, warehouse_at

ray = pytest.importorskip("ray")
AZURE = Path(__file__).parent.parent / "data" / "azure_llm_inference_code.csv"
NODE_TIMEOUT = (
    "The current node timed out during startup. This could happen because some of the "
    "raylet failed to startup or the GCS has become overloaded."
)


def _failing_init(exc: Exception):
    def init(**_: object) -> None:
        raise exc

    return init


@pytest.mark.parametrize(
    "exc, shown",
    [
        (Exception(NODE_TIMEOUT), f"(Exception: {NODE_TIMEOUT})"),
        (
            TimeoutError("Timed out after 30 seconds while waiting for node to startup.\nmore"),
            "(TimeoutError: Timed out after 30 seconds while waiting for node to startup.)",
        ),
    ],
)
def test_a_timed_out_start_says_so_in_one_sentence(tmp_path, monkeypatch, exc, shown):
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", _failing_init(exc))
    root = warehouse_at(tmp_path / "wh")
    result = run_kvtrace("-w", root, "ingest", str(AZURE), "--engine", "ray")
    assert result.returncode == 1
    assert result.stderr == (
        f"Error: Ray could not start a cluster on this machine {shown}; its start-up timed "
        "out, as it can on a busy machine: run again when the machine is less loaded, start "
        "a cluster first (ray start --head) and pass --address auto, or use --engine local\n"
    )
    assert not Path(root).exists()  # the cluster is started before the warehouse is created


def test_another_start_failure_names_the_cluster_and_ray_s_words(monkeypatch):
    from kvtrace.distributed import ray_engine
    from kvtrace.errors import KvtraceError

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", _failing_init(RuntimeError("Failed to connect to GCS.")))
    with pytest.raises(KvtraceError) as caught:
        ray_engine.start("10.0.0.1:6379")
    assert str(caught.value) == (
        "Ray could not join the cluster at 10.0.0.1:6379 (RuntimeError: Failed to connect to "
        "GCS.); check that cluster with ray status, or use --engine local"
    )

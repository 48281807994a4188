"""The warehouse's storage failing or raced: one sentence, and nothing lost or doubled."""

from __future__ import annotations

import os
import subprocess

import pytest

from kvtrace import connect
from kvtrace.ingest import fanout, ingest
from kvtrace.warehouse import Warehouse
from tests.conftest import DATA, KVTRACE_PROCESS, seed_record, warehouse_at, write_jsonl
from tests.s3_server import S3Server
from tests.tcp_proxy import TcpProxy


@pytest.fixture
def s3_behind_a_proxy():
    """A warehouse on an S3 server of its own, reached through a proxy the test can cut
    (the server puts the environment back as it found it)."""
    with S3Server() as server:
        server.create_bucket("kvtrace-outage")
        proxy = TcpProxy("127.0.0.1", int(server.endpoint.rsplit(":", 1)[1]))
        proxy.restore()
        os.environ["AWS_ENDPOINT_URL"] = proxy.url
        yield Warehouse("s3://kvtrace-outage/wh", create=True), proxy
        proxy.cut()


def test_an_s3_outage_in_a_folder_ingest_is_one_sentence_naming_what_was_committed(
    s3_behind_a_proxy, tmp_path, monkeypatch, cli
):
    warehouse, proxy = s3_behind_a_proxy
    folder = tmp_path / "traces"
    for request, name in enumerate("abcd"):
        write_jsonl(folder / f"{name}.jsonl", [seed_record(request, 0, 99, [1])])
    original, started = fanout.ingest_file, []

    def outage_before_the_third_file(*args, **kwargs):
        started.append(1)
        if len(started) == 3:
            proxy.cut()
        return original(*args, **kwargs)

    monkeypatch.setattr(fanout, "ingest_file", outage_before_the_third_file)
    status, _, err = cli("-w", warehouse.location, "ingest", str(folder))
    assert status == 1
    assert err.count("\n") == 1 and "\x1b[" not in err and "Traceback" not in err
    assert err.startswith(
        "Error: c.jsonl was not ingested: the warehouse at s3://kvtrace-outage/wh failed ("
    )
    assert err.rstrip().endswith(
        "(a.jsonl, b.jsonl were committed before it; the same "
        "command again skips what was committed)"
    )
    proxy.restore()
    monkeypatch.setattr(fanout, "ingest_file", original)
    report = ingest(warehouse, [str(folder)])
    assert [f.status for f in report.files] == [
        "already ingested",
        "already ingested",
        "ingested",
        "ingested",
    ]
    assert connect(warehouse).execute("SELECT count(*) FROM dsa_steps").fetchone() == (4,)


def test_processes_racing_to_ingest_one_file_store_it_once_and_the_losers_say_so(tmp_path):
    location = warehouse_at(tmp_path / "wh")
    Warehouse(location, create=True)
    trace = DATA / "azure_llm_inference_code.csv"
    command = [
        *KVTRACE_PROCESS,
        "-w",
        location,
        "ingest",
        str(trace),
    ]
    processes = [
        subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=300) for p in processes]
    assert [p.returncode for p in processes] == [0, 0, 0, 0], outputs
    said = [out.splitlines()[0] for out, _ in outputs]
    assert sum("8,819 rows into run" in line for line in said) == 1, said
    assert sum("already ingested" in line for line in said) == 3, said
    con = connect(location)
    assert con.execute("SELECT count(*) FROM workload_requests").fetchone() == (8819,)
    assert con.execute(
        "SELECT count(DISTINCT commit_id) FROM warehouse_commits WHERE operation = 'ingest'"
    ).fetchone() == (1,)

"""An S3-compatible server on loopback for tests: moto's server mode, in its own process
(an in-process server would wait on the GIL that a Delta Lake call may hold)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

ENVIRONMENT = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ALLOW_HTTP",
    "AWS_EC2_METADATA_DISABLED",
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class S3Server:
    """A moto server on 127.0.0.1 whose address and test credentials are put in the
    environment while it runs (and taken out after)."""

    def __init__(self) -> None:
        self.endpoint = ""
        self._process: subprocess.Popen | None = None
        self._saved: dict[str, str | None] = {}

    def __enter__(self) -> S3Server:
        port = _free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.endpoint, timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    raise RuntimeError("the moto S3 server did not start") from None
                time.sleep(0.1)
        values = ["testing", "testing", "us-east-1", self.endpoint, "true", "true"]
        for name, value in zip(ENVIRONMENT, values, strict=True):
            self._saved[name] = os.environ.get(name)
            os.environ[name] = value
        return self

    def create_bucket(self, name: str) -> None:
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint).create_bucket(Bucket=name)

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=30)
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

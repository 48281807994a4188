"""An S3-compatible server on loopback for tests (moto's server mode)."""

from __future__ import annotations

import logging
import os

ENVIRONMENT = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ENDPOINT_URL",
               "AWS_ALLOW_HTTP", "AWS_EC2_METADATA_DISABLED")


class S3Server:
    """A moto server on 127.0.0.1 whose address and test credentials are put in the
    environment while it runs (and taken out after)."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._saved: dict[str, str | None] = {}
        self.endpoint = ""

    def __enter__(self) -> S3Server:
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        values = ["testing", "testing", "us-east-1", self.endpoint, "true", "true"]
        for name, value in zip(ENVIRONMENT, values, strict=True):
            self._saved[name] = os.environ.get(name)
            os.environ[name] = value
        return self

    def create_bucket(self, name: str) -> None:
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint).create_bucket(Bucket=name)

    def __exit__(self, *exc: object) -> None:
        self._server.stop()
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

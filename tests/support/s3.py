"""A real S3-API server on localhost for the tests (moto's threaded server: the S3 HTTP protocol, in process),
and the environment a client of it reads: the standard AWS_* variables, AWS_ENDPOINT_URL included."""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def s3_server(bucket: str = "gtmkit-test"):
    """Yields (endpoint URL, environment dict) with `bucket` created; the caller applies the environment (e.g.
    monkeypatch.setenv or a child process's env)."""
    from moto.server import ThreadedMotoServer
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_ENDPOINT_URL": endpoint, "AWS_EC2_METADATA_DISABLED": "true"}
        import pyarrow.fs as pafs
        fs = pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1",
                               endpoint_override=endpoint, allow_bucket_creation=True)
        fs.create_dir(bucket)
        yield endpoint, env
    finally:
        server.stop()


def s3_filesystem(endpoint: str):
    import pyarrow.fs as pafs
    return pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1", endpoint_override=endpoint)


def apply(env: dict) -> dict:
    """os.environ with env on top (for child processes)."""
    return {**os.environ, **env}

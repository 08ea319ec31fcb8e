"""A local S3-compatible server (moto) on 127.0.0.1 for the object-storage tests.

The server runs in a thread of the test process; this process and every process it starts
(``kedro`` subprocesses, Ray workers) reach it through ``AWS_ENDPOINT_URL``, which botocore,
and so s3fs, read, with throwaway credentials.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

BUCKET = "hed-test"


@contextmanager
def moto_s3(bucket: str = BUCKET) -> Iterator[str]:
    """Start moto's S3 server on a free port of 127.0.0.1 with ``bucket``; yield its URL.

    ``AWS_ENDPOINT_URL`` and fake credentials are set in ``os.environ`` while it runs and
    restored after.
    """
    import fsspec
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    variables = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        fsspec.filesystem("s3", skip_instance_cache=True).mkdir(bucket)
        yield endpoint
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        clear_s3_instance_caches()
        server.stop()


def clear_s3_instance_caches() -> None:
    """Forget every cached s3fs instance, subclasses' too (HED's atomic subclass keeps its
    own fsspec cache): a later server, on another port, must not get a client of this one."""
    import s3fs

    classes = [s3fs.S3FileSystem]
    while classes:
        cls = classes.pop()
        cls.clear_instance_cache()
        classes.extend(cls.__subclasses__())


def s3() -> object:
    """A fresh s3fs filesystem (no listing cache from an earlier call)."""
    import fsspec

    return fsspec.filesystem("s3", skip_instance_cache=True)

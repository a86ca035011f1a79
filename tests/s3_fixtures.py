"""pytest fixtures for the S3 tests: one real S3 server per test session (see tests/s3server.py).

Import them into a test module (``from s3_fixtures import s3server, bucket, s3env``). The
server kind shows in every test id (``[ceph]`` or ``[moto]``) and on the terminal when it
starts; it is stopped at the end of the session even when tests fail.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import s3server as _s3server  # noqa: E402

KIND = _s3server.choose_kind()
_counter = itertools.count()


@pytest.fixture(scope="session", params=[KIND], ids=[KIND])
def s3server(request):
    """The running server (Ceph RGW, or moto where Ceph is not installed)."""
    workdir = tempfile.mkdtemp(prefix=f"rlvr-s3-{request.param}-")
    try:
        srv = _s3server.start(workdir, request.param)  # its error carries the server's log tail
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            tr.ensure_newline()
            tr.write_line(f"S3 test server: {srv.describe} at {srv.endpoint_url}")
    try:
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def s3env(s3server, monkeypatch):
    """Point boto3's standard environment variables at the test server (credentials included)."""
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    for k, v in s3server.env().items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    monkeypatch.setenv("RLVR_S3_RETRIES", "6")
    return s3server


@pytest.fixture
def bucket(s3env):
    """A fresh, empty bucket for one test."""
    name = f"rlvr-test-{os.getpid()}-{next(_counter)}"
    s3env.client().create_bucket(Bucket=name)
    return name

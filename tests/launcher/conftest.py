"""Fixtures the launcher's pytest suites share."""

import os
import tempfile

import pytest


@pytest.fixture
def rt(monkeypatch):
    """A private runtime directory for the test; empty at the end."""
    d = tempfile.mkdtemp(prefix="sf-rt-")
    os.chmod(d, 0o700)
    monkeypatch.setenv("SHMFEED_RUNTIME_DIR", d)
    yield d
    left = os.listdir(d)
    os.rmdir(d) if not left else None
    assert not left, f"left in the runtime directory: {left}"

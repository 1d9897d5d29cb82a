"""Where `import shmfeed` came from. Under scripts/test-install (SHMFEED_EXPECT_INSTALLED)
the package and its libshmfeed.so must be the installed wheel's, found with no
environment variable; under `meson test`, the source tree's with the build's library."""

import os
import sys

import pytest

import shmfeed
from shmfeed import _native


def test_package_and_library_origin():
    pkg = os.path.dirname(os.path.abspath(shmfeed.__file__))
    lib = os.path.abspath(_native.lib()._name)
    if os.environ.get("SHMFEED_EXPECT_INSTALLED"):
        assert "SHMFEED_LIB" not in os.environ and "PYTHONPATH" not in os.environ
        assert pkg.startswith(os.path.abspath(sys.prefix)), pkg
        assert os.path.dirname(lib) == pkg, lib
    else:
        assert os.path.samefile(lib, os.environ["SHMFEED_LIB"]), lib
    assert shmfeed.version() == "0.1.0"


def test_library_override_is_honoured(monkeypatch):
    """SHMFEED_LIB stays an override: a path that does not exist is reported."""
    monkeypatch.setattr(_native, "_lib", None)
    monkeypatch.setenv("SHMFEED_LIB", "/nonexistent/libshmfeed.so")
    with pytest.raises(OSError, match="/nonexistent/libshmfeed.so"):
        _native.lib()

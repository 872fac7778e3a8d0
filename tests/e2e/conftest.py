"""Shared fixtures: `attnd` is one daemon with default flags for the whole
test module; tests that need other flags start their own Attnd(...)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from attnd_proc import Attnd  # noqa: E402


@pytest.fixture(scope="module")
def attnd():
    with Attnd() as a:
        yield a

"""Shared fixtures: `attnd` is one daemon with default flags for the whole
test module; tests that need other flags start their own Attnd(...)."""
import os
import sys

import pytest

# Responses are recorded for test_e2e_zz_responses.py (before attnd_proc
# reads the variable); one file per run, emptied here.
if "ATTND_E2E_RECORD" not in os.environ:
    _build = os.path.dirname(os.path.abspath(os.environ.get("ATTND_BIN", "build/attnd")))
    os.environ["ATTND_E2E_RECORD"] = os.path.join(_build, "e2e-responses.jsonl")
open(os.environ["ATTND_E2E_RECORD"], "w").close()

sys.path.insert(0, os.path.dirname(__file__))
from attnd_proc import Attnd  # noqa: E402


def pytest_configure(config):
    # An exception that escapes a test's helper thread fails that test
    # instead of ending as a warning in the summary.
    config.addinivalue_line("filterwarnings",
                            "error::pytest.PytestUnhandledThreadExceptionWarning")


@pytest.fixture(scope="module")
def attnd():
    with Attnd() as a:
        yield a

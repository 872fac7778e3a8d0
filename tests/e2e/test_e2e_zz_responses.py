"""Every response the e2e suite received (recorded by attnd_proc.request),
status by status, against the OpenAPI document's schema for its route
(tests/browser/responses.mjs, Ajv). Named to run last: pytest runs the
files in name order."""
import os
import subprocess

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
BROWSER_DIR = os.path.join(ROOT, "tests", "browser")


def test_every_recorded_response_matches_the_document():
    rec = os.environ["ATTND_E2E_RECORD"]
    if os.environ.get("ATTND_BROWSER", "1") == "0":
        pytest.skip("ATTND_BROWSER=0: no node")
    assert os.path.isdir(os.path.join(BROWSER_DIR, "node_modules", "ajv")), \
        "tests/browser/node_modules missing: run `make deps-test` (npm ci)"
    if os.path.getsize(rec) == 0:
        pytest.skip("no e2e responses were recorded in this run")
    p = subprocess.run(["node", "responses.mjs", os.path.join(ROOT, "server", "web", "openapi.json"),
                        os.path.abspath(rec)], cwd=BROWSER_DIR, capture_output=True, text=True,
                       timeout=300)
    fails = [l for l in p.stdout.splitlines() if l.startswith("FAIL")]
    assert p.returncode == 0, "\n".join(fails + p.stdout.splitlines()[-2:] + [p.stderr[-2000:]])

"""tests/e2e/test_e2e_openapi.py — the OpenAPI document, checked by real tools.

tests/browser/openapi.mjs validates server/web/openapi.json with
@seriousme/openapi-schema-validator (OpenAPI 3.1), checks every example
against its schema with Ajv (JSON Schema 2020-12), and then sends every
documented example to a running attnd: the documented status, schema and
key numbers must come back, and GET /v1/openapi.json must serve this very
document.
"""
import os
import subprocess

import pytest

from attnd_proc import E2E_TLS

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BROWSER_DIR = os.path.join(ROOT, "tests", "browser")
DOC = os.path.join(ROOT, "server", "web", "openapi.json")


def run_openapi(*args):
    assert os.path.isdir(os.path.join(BROWSER_DIR, "node_modules", "@seriousme")), \
        "tests/browser/node_modules missing: run `make deps-test` (npm ci)"
    p = subprocess.run(["node", "openapi.mjs", DOC, *args], cwd=BROWSER_DIR,
                       capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    print(out)
    assert p.returncode == 0, "\n".join(
        line for line in out.splitlines() if not line.startswith("ok ")) or out
    assert " 0 failed" in out
    return out


def test_openapi_document_and_examples_are_valid():
    out = run_openapi()
    assert "ok   document is valid OpenAPI 3.1" in out


@pytest.mark.skipif(E2E_TLS, reason="the node client does not trust the run's CA")
def test_openapi_examples_answer_as_documented(attnd):
    out = run_openapi(attnd.url)
    assert "ok   GET /v1/openapi.json serves this document" in out

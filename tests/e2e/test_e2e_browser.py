"""tests/e2e/test_e2e_browser.py — the teaching page in real headless Chromium.

Runs tests/browser/demo.mjs (playwright-core driving Debian's
/usr/bin/chromium) against a real attnd:
- same origin: the page as attnd serves it at "/";
- CORS: the same files served by a tiny static server on a second localhost
  port, calling attnd started with --cors-origins set to that origin;
- refused: the same second origin calling an attnd whose --cors-origins
  does not list it, where the browser must block the calls and the page
  must say so;
- API key: an attnd with --api-key answers the page 401 until the learner
  types the key.
tests/browser/teach.mjs drives the looking-and-dragging views (teach.js,
model.js); tests/browser/model.mjs the pasted-model panel's edge inputs,
errors and keyboard reading (model.js); tests/browser/access.mjs contrast,
focus ring, busy state, large inputs, 320 px, print; tests/browser/stale.mjs
numbers that must not outlive their inputs; tests/browser/fields.mjs the
page's own fields against what it sends.
Screenshots land in <dir of ATTND_BIN>/artifacts/ (build/artifacts/ for the
default build). `make test` installs chromium and runs `npm ci` first.
"""
import functools
import http.server
import os
import subprocess
import threading

import pytest

from attnd_proc import BIN, E2E_TLS, Attnd

# Chromium would have to trust the run's throwaway CA; the page's TLS is the
# server's, which test_e2e_tls.py and test_e2e_testssl.py check.
pytestmark = pytest.mark.skipif(E2E_TLS, reason="Chromium does not trust the run's CA")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BROWSER_DIR = os.path.join(ROOT, "tests", "browser")
WEB_DIR = os.path.join(ROOT, "server", "web")
ARTIFACTS = os.path.join(os.path.dirname(os.path.abspath(BIN)), "artifacts")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def run_node(script, *args, timeout=240):
    """Run a node script of tests/browser; fail the test with its output
    unless it exits 0."""
    assert os.path.isdir(os.path.join(BROWSER_DIR, "node_modules", "playwright-core")), \
        "tests/browser/node_modules missing: run `make deps-test` (npm ci)"
    assert os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} missing: run `make deps-test`"
    p = subprocess.run(["node", script, *args], cwd=BROWSER_DIR, capture_output=True,
                       text=True, timeout=timeout)
    out = p.stdout + p.stderr
    print(out)
    assert p.returncode == 0, "\n".join(
        line for line in out.splitlines() if not line.startswith("ok ")) or out
    assert " 0 failed" in out
    return out


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


@pytest.fixture
def static_origin():
    """server/web/ served read-only from a second localhost port."""
    handler = functools.partial(_Quiet, directory=WEB_DIR)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_demo_page_same_origin():
    with Attnd() as a:
        out = run_node("demo.mjs", "--page", a.url + "/", "--api", a.url,
                       "--shots", ARTIFACTS, "--name", "demo")
    assert os.path.getsize(os.path.join(ARTIFACTS, "demo.png")) > 10000, out
    assert os.path.getsize(os.path.join(ARTIFACTS, "demo-375.png")) > 10000, out


def test_teaching_views_look_and_drag():
    """tests/browser/teach.mjs: dragging with real mouse events, the stepper,
    the head view, quiet heads, a pasted 4-head 64-token request, axe-core,
    screenshots at 1400 and 390 px (ARTIFACTS/teach-*.png)."""
    with Attnd() as a:
        out = run_node("teach.mjs", "--page", a.url + "/", "--api", a.url, "--shots", ARTIFACTS)
    assert os.path.getsize(os.path.join(ARTIFACTS, "teach-1400.png")) > 10000, out
    assert os.path.getsize(os.path.join(ARTIFACTS, "teach-390.png")) > 10000, out


def test_pasted_model_panel():
    """tests/browser/model.mjs: one head with a heads axis, errors beside the
    panel, the maps read cell by cell from the keyboard, long tokens."""
    with Attnd() as a:
        run_node("model.mjs", "--page", a.url + "/", "--api", a.url)


def test_page_access_and_layout():
    """tests/browser/access.mjs: aria-busy on a bad cell, the colour ramps'
    contrast, the focus ring, 10 x 60 inputs, 320 px, print colours."""
    with Attnd() as a:
        run_node("access.mjs", "--page", a.url + "/", "--api", a.url)


def test_no_numbers_of_inputs_gone_by():
    """tests/browser/stale.mjs: an option that is no number is not sent
    (attnd would use its default), a failed plane request takes its weights
    down, an older quiet-heads answer arriving last is not drawn."""
    with Attnd() as a:
        run_node("stale.mjs", "--page", a.url + "/", "--api", a.url)


def test_fields_against_what_is_sent():
    """tests/browser/fields.mjs: an API base URL without a scheme is refused
    before anything is sent, one ending in /v1 is taken without it; attnd's
    error about an option marks and names that option's field; a change of
    the API base URL (to a second attnd) or key ends the open session."""
    with Attnd() as a, Attnd("--cors-origins", a.url) as other:
        run_node("fields.mjs", "--page", a.url + "/", "--api", a.url, "--other", other.url)


def test_demo_page_from_another_origin_with_cors(static_origin):
    with Attnd("--cors-origins", static_origin) as a:
        run_node("demo.mjs", "--page", f"{static_origin}/index.html?api={a.url}",
                 "--api", a.url, "--shots", ARTIFACTS, "--name", "demo-cors")


def test_demo_page_from_an_origin_not_allowed(static_origin):
    with Attnd("--cors-origins", "http://127.0.0.1:1") as a:
        run_node("demo.mjs", "--page", f"{static_origin}/index.html?api={a.url}",
                 "--api", a.url, "--refused")


def test_demo_page_with_api_key():
    with Attnd("--api-key", "teach-me-attention") as a:
        run_node("demo.mjs", "--page", a.url + "/", "--api", a.url,
                 "--api-key", "teach-me-attention")

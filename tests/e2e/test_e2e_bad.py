"""tests/e2e/test_e2e_bad.py — the hostile-input catalogue against the real daemon.

One pytest case per folder of tests/data/bad/ (see its README.md): the raw
request bytes (`request`, or `gen.py`'s generate()) go over a plain socket,
exactly as written, to a real attnd started with the case's flags (cases with
equal flags share a daemon). The answer must carry the expected status and,
for API errors, the error object {"error":{"code","message","path"}}
with CORS-safe headers; and after every case the daemon must still be alive
and answer /healthz.
"""
import json
import os
import runpy
import socket
import ssl
import threading
import time

import pytest

from attnd_proc import Attnd, connect

BAD_DIR = os.path.join(os.path.dirname(__file__), "..", "data", "bad")


def _load_cases():
    out = []
    for name in sorted(os.listdir(BAD_DIR)):
        d = os.path.join(BAD_DIR, name)
        if os.path.isfile(os.path.join(d, "expect.json")):
            out.append(name)
    return out


CASES = _load_cases()


def case_bytes(d):
    gen = os.path.join(d, "gen.py")
    if os.path.exists(gen):
        return runpy.run_path(gen)["generate"]()
    with open(os.path.join(d, "request"), "rb") as f:
        return f.read()


# ---- raw HTTP client -------------------------------------------------------

class RawResponse:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers      # dict: lower-case name -> list of values
        self.body = body

    def header(self, name):
        vals = self.headers.get(name.lower())
        return vals[0] if vals else None

    def __repr__(self):
        return f"<RawResponse {self.status} {self.headers} {self.body[:300]!r}>"


def _parse_head(head):
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    status = int(parts[1])
    headers = {}
    for line in lines[1:]:
        if b":" in line:
            k, v = line.split(b":", 1)
            headers.setdefault(k.strip().lower().decode("latin-1"), []).append(
                v.strip().decode("latin-1"))
    return status, headers


def _dechunk(data):
    """Returns (body, complete)."""
    out = b""
    pos = 0
    while True:
        nl = data.find(b"\r\n", pos)
        if nl < 0:
            return out, False
        size = int(data[pos:nl].split(b";")[0], 16)
        if size == 0:
            return out, True
        start = nl + 2
        if len(data) < start + size + 2:
            return out, False
        out += data[start:start + size]
        pos = start + size + 2


def _complete(buf):
    """Parse buf as one response (skipping 1xx). None while incomplete."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return None
        status, headers = _parse_head(buf[:end])
        rest = buf[end + 4:]
        if 100 <= status < 200:
            buf = rest
            continue
        te = ",".join(headers.get("transfer-encoding", [])).lower()
        if "chunked" in te:
            body, done = _dechunk(rest)
            return RawResponse(status, headers, body) if done else None
        if "content-length" in headers:
            n = int(headers["content-length"][0])
            return RawResponse(status, headers, rest[:n]) if len(rest) >= n else None
        return None     # body runs to EOF


def _final(buf):
    """The response as far as it came, at EOF."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return None
        status, headers = _parse_head(buf[:end])
        rest = buf[end + 4:]
        if 100 <= status < 200:
            buf = rest
            continue
        te = ",".join(headers.get("transfer-encoding", [])).lower()
        body = _dechunk(rest)[0] if "chunked" in te else rest
        return RawResponse(status, headers, body)


def send_raw(port, data, timeout):
    """Send data while reading; return the response (or raise)."""
    s = connect(port, timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    send_err = []

    def sender():
        try:
            view = memoryview(data)
            step = 1 << 16
            for i in range(0, len(view), step):
                s.sendall(view[i:i + step])
        except OSError as e:        # the server may answer and close early
            send_err.append(e)

    t = threading.Thread(target=sender, daemon=True)
    if isinstance(s, ssl.SSLSocket):
        sender()                    # an SSL socket is not for two threads at once
    else:
        t.start()
    buf = b""
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except (ConnectionResetError, ssl.SSLError):
                break
            if not chunk:
                break
            buf += chunk
            r = _complete(buf)
            if r is not None:
                return r
        r = _final(buf)
        if r is None:
            raise AssertionError(
                f"no HTTP response (got {buf[:200]!r}; send error {send_err}; "
                f"timed out: {time.time() >= deadline})")
        return r
    finally:
        s.close()
        if t.is_alive():
            t.join(timeout=5)


# ---- daemons -----------------------------------------------------------------

@pytest.fixture(scope="module")
def daemons():
    pool = {}

    def get(flags):
        key = tuple(flags)
        if key not in pool:
            pool[key] = Attnd(*flags)
        return pool[key]

    get.pool = pool
    yield get
    bad = []
    for flags, d in pool.items():
        rc = d.stop()
        if rc != 0:     # e.g. LeakSanitizer's report under `make asan`
            bad.append(f"attnd {' '.join(flags)} exited {rc}: {d.logs()[-3000:]}")
    assert not bad, "\n".join(bad)


def _setup_session(d, setup):
    r = d.post("/v1/sessions", setup["session"])
    assert r.status == 201, f"setup: creating a session answered {r}"
    sid = r.json()["id"]
    for body in setup.get("append", []):
        r = d.post(f"/v1/sessions/{sid}/kv", body)
        assert r.status == 200, f"setup: appending to the session answered {r}"
    then = setup.get("then", "keep")
    if then == "delete":
        r = d.request("DELETE", f"/v1/sessions/{sid}")
        assert r.status == 204, f"setup: deleting the session answered {r}"
    if setup.get("sleep"):
        time.sleep(setup["sleep"])
    return sid


def _as_list(v):
    return v if isinstance(v, list) else [v]


def check_cors(r):
    acao = r.header("access-control-allow-origin")
    acac = (r.header("access-control-allow-credentials") or "").lower()
    if acao == "*":
        assert acac != "true", f"'*' with credentials: {r.headers}"
    elif acao:
        vary = ",".join(r.headers.get("vary", [])).lower()
        assert "origin" in vary, f"ACAO {acao!r} without Vary: Origin: {r.headers}"


def check_v1_error(r, exp):
    ctype = (r.header("content-type") or "").lower()
    assert ctype.startswith("application/json"), f"error Content-Type {ctype!r}: {r}"
    body = json.loads(r.body)
    assert isinstance(body, dict) and set(body) == {"error"}, f"error body shape: {r}"
    e = body["error"]
    assert isinstance(e, dict), r
    assert {"code", "message", "path"} <= set(e), f"error object lacks fields: {e}"
    assert isinstance(e["code"], str) and e["code"], e
    assert isinstance(e["message"], str) and e["message"], e
    assert e["path"] is None or (isinstance(e["path"], str)
                                 and (e["path"] == "" or e["path"].startswith("/"))), e
    if "code" in exp:
        assert e["code"] in _as_list(exp["code"]), \
            f"code {e['code']!r}, expected {exp['code']!r}: {e}"
    if "path" in exp:
        assert e["path"] in _as_list(exp["path"]), \
            f"path {e['path']!r}, expected {exp['path']!r}: {e}"


def check_v2_error(r):
    body = json.loads(r.body)
    assert isinstance(body, dict) and isinstance(body.get("error"), str), r


@pytest.mark.parametrize("name", CASES)
def test_bad_case(daemons, name):
    d_path = os.path.join(BAD_DIR, name)
    with open(os.path.join(d_path, "expect.json")) as f:
        exp = json.load(f)
    d = daemons(exp.get("flags", []))
    data = case_bytes(d_path)
    if "setup" in exp:
        sid = _setup_session(d, exp["setup"])
        data = data.replace(b"{{SID}}", sid.encode())

    r = send_raw(d.port, data, exp.get("timeout", 20))

    if "status" in exp:
        assert r.status in _as_list(exp["status"]), f"status {r.status}, expected {exp['status']}: {r}"
    if "status_class" in exp:
        assert r.status // 100 in _as_list(exp["status_class"]), \
            f"status {r.status}, expected {exp['status_class']}xx: {r}"
    for h in exp.get("require_headers", []):
        assert r.header(h), f"missing header {h}: {r}"
    for h in exp.get("absent_headers", []):
        assert not r.header(h), f"header {h} must be absent: {r}"
    for bad in exp.get("forbid", []):
        assert bad.encode() not in r.body, f"response contains {bad!r}: {r}"
    check_cors(r)

    shape = exp.get("error_shape", "v1" if r.status >= 400 else "none")
    if shape == "v1":
        check_v1_error(r, exp)
    elif shape == "v2":
        check_v2_error(r)
    elif shape == "any" and r.status >= 400 and \
            (r.header("content-type") or "").startswith("application/json"):
        body = json.loads(r.body)
        if isinstance(body.get("error"), dict):
            check_v1_error(r, exp)
        else:
            check_v2_error(r)

    # The daemon keeps serving.
    assert d.proc.poll() is None, f"attnd exited ({d.proc.returncode}): {d.logs()[-2000:]}"
    h = d.get("/healthz", timeout=10)
    assert h.status == 200, f"/healthz after the case: {h}"


def test_catalogue_size():
    assert len(CASES) >= 50, len(CASES)


def test_logs_stay_valid_json(daemons):
    """Whatever the clients sent, every log line the daemons wrote is one
    valid UTF-8 JSON object (no log injection, nothing a collector chokes on).
    Runs after the catalogue, over the daemons it started."""
    bad = []
    for flags, d in daemons.pool.items():
        d.log.flush()
        with open(d.log_path, "rb") as f:
            for line in f:
                try:
                    doc = json.loads(line.decode("utf-8"))
                    assert isinstance(doc, dict)
                except (UnicodeDecodeError, ValueError, AssertionError):
                    bad.append(line[:200])
    assert daemons.pool, "no daemon ran"
    assert not bad, f"{len(bad)} log lines are not UTF-8 JSON objects, e.g. {bad[:3]}"

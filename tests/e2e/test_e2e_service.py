"""tests/e2e/test_e2e_service.py — the attnd process as an operator sees it.

Probes, /v1/info, /metrics, the seed example's numbers, static files, CORS,
auth, JSON 404/405, configuration (flags, ATTND_* twins, --help, --version,
bad values), the log lines, and a SIGTERM drain with a request in flight.
Each test talks HTTP to the real build/attnd (attnd_proc.Attnd).
"""
import base64
import json
import math
import os
import random
import re
import signal
import struct
import subprocess
import threading
import time

import pytest

from attnd_proc import Attnd, BIN, connect, http_connection

SEED = {"q": [[1, 0]], "k": [[1, 0], [0, 1], [-1, 0]], "v": [[1, 0], [0, 1], [0, 0]]}
W_PLAIN = [0.575975, 0.283995, 0.140029]
W_QBIAS = [0.445808, 0.445808, 0.108383]


def close(a, b, tol=1e-6):
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))


def run_bin(*args, env=None, timeout=10):
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run([BIN, *args], capture_output=True, text=True, env=full, timeout=timeout)


# ---- probes, info, metrics -------------------------------------------------

def test_healthz_and_readyz(attnd):
    r = attnd.get("/healthz")
    assert r.status == 200 and r.headers["content-type"].startswith("application/json")
    assert r.json()["status"] == "ok"
    r = attnd.get("/readyz")
    assert r.status == 200, r


def test_info_reports_configuration():
    with Attnd("--workers", "3", "--max-elements", "12345", "--max-body-bytes", "2m") as a:
        info = a.get("/v1/info").json()
        assert info["version"] == "0.1.0"
        assert info["threads"]["workers"] == 3
        assert info["limits"]["max_elements"] == 12345
        assert info["limits"]["max_body_bytes"] == 2 * 1024 * 1024
        assert "blas" in info and info["blas"]
        assert info["fused_kernel"] in ("avx512", "avx2", "none")   # test_kernels checks which
        assert info["kernels"]["float64"] == "blas"
        f32 = info["kernels"]["float32"]
        assert f32 == (info["fused_kernel"] if info["fused_kernel"] != "none" else "blas")


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def test_kernel_flag_and_env_choose_a_narrower_kernel():
    """--kernel / ATTND_KERNEL pick the fused kernel; one this CPU lacks
    falls back to a narrower one and the log says so; a bad name is a usage
    error. The forced kernel still answers the README's example."""
    flags = cpu_flags()
    has2 = {"avx2", "fma"} <= flags
    has512 = {"avx512f", "avx512dq"} <= flags
    with Attnd("--kernel", "none") as a:
        info = a.get("/v1/info").json()
        assert info["fused_kernel"] == "none" and info["kernels"]["float32"] == "blas"
    want = "avx2" if has2 else "none"
    with Attnd(env={"ATTND_KERNEL": "avx2"}) as a:
        assert a.get("/v1/info").json()["fused_kernel"] == want
        body = {"q": [[1.0] * 8] * 8, "k": [[0.5] * 8] * 16, "v": [[2.0] * 4] * 16}
        r = a.post("/v1/attention", body)
        assert r.status == 200, r
        assert all(abs(x - 2.0) < 1e-6 for row in r.json()["output"] for x in row)
    with Attnd("--kernel", "avx512") as a:
        info = a.get("/v1/info").json()
        assert info["fused_kernel"] == ("avx512" if has512 else want)
        if not has512:
            assert "does not run it; using" in a.logs()
    p = run_bin("--kernel", "sse")
    assert p.returncode == 2 and "--kernel" in p.stderr


def metric(text, name, **labels):
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pat = "^" + re.escape(name) + (r"\{" + re.escape(want) + r"\}" if labels else "") + r" (\S+)$"
    m = re.search(pat, text, re.M)
    return float(m.group(1)) if m else 0.0


def test_metrics_count_requests_bytes_and_latency(attnd):
    before = attnd.get("/metrics").body.decode()
    body = json.dumps(SEED).encode()
    for _ in range(3):
        assert attnd.post("/v1/attention", SEED).status == 200
    assert attnd.get("/nope").status == 404
    k = dict(route="/v1/attention", code="200")
    # A request is counted once its response has been sent (MHD's completion
    # callback); a scrape on another connection, served by the other HTTP
    # thread, can arrive a moment before the last one is counted.
    deadline = time.monotonic() + 2
    while True:
        after = attnd.get("/metrics")
        text = after.body.decode()
        settled = (metric(text, "attnd_requests_total", **k) >= metric(before, "attnd_requests_total", **k) + 3
                   and metric(text, "attnd_requests_in_flight") == 1)
        if settled or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert after.status == 200 and after.headers["content-type"].startswith("text/plain")
    for n in ("attnd_requests_total", "attnd_request_duration_seconds", "attnd_requests_in_flight",
              "attnd_request_bytes_total", "attnd_response_bytes_total", "attnd_sessions",
              "attnd_kv_cache_bytes", "attnd_session_evictions_total",
              "attnd_session_expirations_total"):
        assert f"# TYPE {n} " in text and f"# HELP {n} " in text, n
    assert metric(text, "attnd_requests_total", **k) == metric(before, "attnd_requests_total", **k) + 3
    assert metric(text, "attnd_request_bytes_total") >= metric(before, "attnd_request_bytes_total") + 3 * len(body)
    assert metric(text, "attnd_response_bytes_total") > metric(before, "attnd_response_bytes_total")
    assert metric(text, "attnd_request_duration_seconds_count", route="/v1/attention") >= 3
    assert metric(text, "attnd_requests_in_flight") == 1     # this scrape itself


# ---- the seed example ------------------------------------------------------

def test_seed_example_numbers(attnd):
    r = attnd.post("/v1/attention", SEED)
    assert r.status == 200, r
    out = r.json()
    assert close(out["weights"][0], W_PLAIN)
    assert close(out["output"][0], W_PLAIN[:2])
    assert abs(out["meta"]["scale"] - 2 ** -0.5) < 1e-15
    both = dict(SEED, bias={"q": [0, 1], "k": [3, -2]})
    out = attnd.post("/v1/attention", both).json()
    assert close(out["weights"][0], W_QBIAS)
    kb = dict(SEED, bias={"k": [3, -2]})      # a common K bias leaves the weights alone
    assert close(attnd.post("/v1/attention", kb).json()["weights"][0], W_PLAIN)


@pytest.mark.parametrize("dtype,fmt", [("float64", "d"), ("float32", "f"), ("float16", "e")])
def test_base64_carries_masked_scores_as_inf_and_undefined_lse_as_nan(attnd, dtype, fmt):
    # README (encoding) and the OpenAPI OutTensor say so: JSON numbers give
    # null there, raw bytes carry the IEEE values
    def decoded(t):
        raw = base64.b64decode(t["data"])
        return struct.unpack("<%d%s" % (len(raw) // struct.calcsize(fmt), fmt), raw)
    body = {"q": [[1, 0], [0, 1]], "k": [[1, 0], [0, 1]], "v": [[1], [2]],
            "mask": [[True, False], [False, False]], "dtype": dtype,
            "return": ["scores", "lse", "output"]}
    r = attnd.post("/v1/attention", dict(body, encoding="base64"))
    assert r.status == 200, r
    out = r.json()
    scores, lse = decoded(out["scores"]), decoded(out["lse"])
    assert scores[0] == pytest.approx(2 ** -0.5, rel=1e-3)
    assert scores[1] == scores[2] == scores[3] == -math.inf
    assert not math.isnan(lse[0]) and math.isnan(lse[1])
    js = attnd.post("/v1/attention", body).json()
    assert js["scores"][0][1] is None and js["scores"][1] == [None, None]
    assert js["lse"][1] is None


# ---- static files, 404, 405 -----------------------------------------------

def test_demo_page_and_openapi(attnd):
    r = attnd.get("/")
    assert r.status == 200 and r.headers["content-type"].startswith("text/html")
    assert b"<html" in r.body.lower()
    assert attnd.get("/index.html").body == r.body
    web = os.path.join(os.path.dirname(__file__), "..", "..", "server", "web")
    if os.path.exists(os.path.join(web, "openapi.json")):
        r = attnd.get("/v1/openapi.json")
        assert r.status == 200 and r.headers["content-type"].startswith("application/json")
        assert "paths" in r.json()
    for name in os.listdir(web):
        if name.endswith(".js"):
            r = attnd.get("/" + name)
            assert r.status == 200 and "javascript" in r.headers["content-type"], name


def test_unknown_route_is_json_404(attnd):
    for path in ("/nope", "/../etc/passwd", "/%2e%2e/etc/passwd", "/server/web/index.html",
                 "/healthz%00x", "/v1/info%00"):
        r = attnd.get(path)
        assert r.status == 404, (path, r)
        assert r.json()["error"]["code"] == "not_found"
    # an escaped NUL no longer cuts the path short: this was served as /v1/attention
    r = attnd.post("/v1/attention%00foo", {"q": [[1]], "k": [[1]], "v": [[1]]})
    assert r.status == 404 and r.json()["error"]["code"] == "not_found", r
    assert attnd.get("/v1/info?x=%00").status == 200      # a query argument may hold one


def test_wrong_method_is_json_405_with_allow(attnd):
    r = attnd.request("PUT", "/v1/attention", b"{}")
    assert r.status == 405
    assert r.json()["error"]["code"] == "method_not_allowed"
    assert "POST" in r.headers["allow"]


def test_static_files_answer_a_wrong_method_405_with_allow(attnd):
    # the transport serves them to GET and HEAD; any other method is the
    # api's 405, as on every other route (it was 404 "no route")
    web = os.path.join(os.path.dirname(__file__), "..", "..", "server", "web")
    paths = ["/", "/v1/openapi.json"] + ["/" + name for name in sorted(os.listdir(web))]
    for path in paths:
        for method in ("POST", "DELETE", "PUT"):
            r = attnd.request(method, path, b"{}" if method != "DELETE" else None)
            assert r.status == 405, (method, path, r)
            assert r.json()["error"]["code"] == "method_not_allowed", (method, path)
            assert r.headers["allow"] == "GET, HEAD", (method, path)


def test_static_files_need_no_key_for_their_405():
    with Attnd("--api-key", "s3cret-key") as a:
        r = a.post("/v1/openapi.json", {})
        assert r.status == 405 and r.headers["allow"] == "GET, HEAD", r


def test_reads_over_max_elements_are_422_response_too_large():
    # GETs that send nothing still answer more than --max-elements numbers
    with Attnd("--max-elements", "40") as a:
        sid = a.post("/v1/sessions", {"d_k": 2, "d_v": 2}).json()["id"]
        for _ in range(5):                                    # 25 rows, 100 numbers
            rows = [[1, 0], [0, 1], [1, 1], [0, 0], [2, 1]]
            assert a.post(f"/v1/sessions/{sid}/kv", {"k": rows, "v": rows}).status == 200
        for path in (f"/v1/sessions/{sid}/kv", "/v1/verify", "/verify"):
            r = a.get(path)
            assert r.status == 422, (path, r)
            assert r.json()["error"]["code"] == "response_too_large", path
        assert "send fewer" not in a.get("/v1/verify").json()["error"]["message"]


# ---- CORS and auth ---------------------------------------------------------

def test_cors_preflight_allowed_and_refused():
    good, bad = "http://teach.example", "http://evil.example"
    with Attnd("--cors-origins", f"{good}, http://other.example") as a:
        pre = {"Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "content-type"}
        r = a.request("OPTIONS", "/v1/attention", headers={"Origin": good, **pre})
        assert r.status == 204, r
        assert r.headers["access-control-allow-origin"] == good
        assert "POST" in r.headers["access-control-allow-methods"]
        assert "origin" in r.headers.get("vary", "").lower()
        r = a.request("OPTIONS", "/v1/attention", headers={"Origin": bad, **pre})
        assert "access-control-allow-origin" not in r.headers
        # errors carry CORS headers too, also the ones the transport answers
        r = a.post("/v1/attention", {"q": 1}, headers={"Origin": good})
        assert r.status == 422 and r.headers["access-control-allow-origin"] == good
        r = a.post("/v1/attention", SEED, headers={"Origin": bad})
        assert r.status == 200 and "access-control-allow-origin" not in r.headers


def test_cors_preflight_offers_the_routes_own_methods():
    origin = "http://teach.example"
    with Attnd("--cors-origins", "*") as a:
        for path, methods in (("/v1/sessions/abc/kv", "GET, HEAD, POST"),
                              ("/v1/sessions/abc", "GET, HEAD, DELETE"),
                              ("/v1/sessions/abc/fork", "POST"),
                              ("/v2/models/attention/infer", "POST"),
                              ("/v2/health/live", "GET, HEAD"),
                              ("/", "GET, HEAD"), ("/v1/openapi.json", "GET, HEAD"),
                              ("/app.js", "GET, HEAD")):
            r = a.request("OPTIONS", path, headers={"Origin": origin,
                                                    "Access-Control-Request-Method": "GET"})
            assert r.status == 204, (path, r)
            assert r.headers["access-control-allow-methods"] == methods, path
        # DELETE on a session's kv is 405, so its preflight does not offer it
        r = a.request("DELETE", "/v1/sessions/abc/kv")
        assert r.status == 405 and r.headers["allow"] == "GET, HEAD, POST"


def test_cors_on_transport_errors():
    good = "http://teach.example"
    with Attnd("--cors-origins", good, "--max-body-bytes", "100") as a:
        r = a.post("/v1/attention", "x" * 500, headers={"Origin": good, "Content-Type": "application/json"})
        assert r.status == 413 and r.json()["error"]["code"] == "body_too_large"
        assert r.headers["access-control-allow-origin"] == good


def test_cors_on_the_static_files():
    """The preflight of /v1/openapi.json offers GET to an allowed origin, so
    the GET's answer must let that page read it (a Swagger UI or Redoc on
    another origin loads the document so): the static files carry the CORS
    headers of every other answer, Vary: Origin included."""
    good, bad = "http://teach.example", "http://evil.example"
    with Attnd("--cors-origins", good) as a:
        for path in ("/v1/openapi.json", "/", "/app.js"):
            for method in ("GET", "HEAD"):
                r = a.request(method, path, headers={"Origin": good})
                assert r.status == 200, (method, path, r)
                assert r.headers.get("access-control-allow-origin") == good, (method, path)
                assert "X-Request-Id" in r.headers["access-control-expose-headers"]
                assert r.headers.get("vary") == "Origin", (method, path)
            r = a.get(path, headers={"Origin": bad})
            assert "access-control-allow-origin" not in r.headers, path
            assert r.headers.get("vary") == "Origin", path
    with Attnd() as a:                      # without --cors-origins: none at all
        r = a.get("/v1/openapi.json", headers={"Origin": good})
        assert not [h for h in r.headers if h.startswith("access-control") or h == "vary"]


def test_auth_on_and_off(attnd):
    assert attnd.post("/v1/attention", SEED).status == 200            # off: open
    with Attnd(env={"ATTND_API_KEY": "s3cret-key"}) as a:
        assert a.get("/healthz").status == 200
        assert a.get("/readyz").status == 200
        r = a.post("/v1/attention", SEED)
        assert r.status == 401 and r.json()["error"]["code"] == "unauthorized"
        r = a.post("/v1/attention", SEED, headers={"Authorization": "Bearer wrong-key!"})
        assert r.status == 401
        r = a.post("/v1/attention", SEED, headers={"Authorization": "Bearer s3cret-key"})
        assert r.status == 200 and close(r.json()["weights"][0], W_PLAIN)
        assert a.get("/metrics").status == 401
        assert a.get("/").status == 200                               # the demo page is public


# ---- configuration ---------------------------------------------------------

FLAGS = ["host", "port", "port-file", "workers", "max-body-bytes", "max-elements",
         "max-sessions", "max-cache-bytes", "session-ttl", "max-tokens", "api-key",
         "cors-origins", "cache-policy", "replica-id", "state-dir", "log-format",
         "drain-timeout"]


def test_help_lists_every_flag_and_twin():
    r = run_bin("--help")
    assert r.returncode == 0
    for f in FLAGS + ["help", "version"]:
        assert f"--{f}" in r.stdout, f
    for f in FLAGS:
        assert "ATTND_" + f.upper().replace("-", "_") in r.stdout, f
    assert "default: 8080" in r.stdout and "default: 127.0.0.1" in r.stdout


def test_version():
    r = run_bin("--version")
    assert r.returncode == 0 and r.stdout.strip() == "attnd 0.1.0"


@pytest.mark.parametrize("args,needle", [
    (["--port", "70000"], "--port"),
    (["--port", "80x"], "--port"),
    (["--port", "-1"], "--port"),
    (["--workers", "0"], "--workers"),
    (["--max-body-bytes", "12q"], "--max-body-bytes"),
    (["--max-body-bytes", ""], "--max-body-bytes"),
    (["--max-elements", "99999999999999999999999"], "--max-elements"),
    (["--session-ttl", "nan"], "--session-ttl"),
    (["--session-ttl", "1e999"], "--session-ttl"),
    (["--drain-timeout", "-5"], "--drain-timeout"),
    (["--log-format", "xml"], "--log-format"),
    (["--cache-policy", "fifo"], "--cache-policy"),
    (["--bogus"], "--bogus"),
    (["--port"], "--port"),
    (["stray"], "stray"),
])
def test_bad_flag_exits_2_with_a_clear_message(args, needle):
    r = run_bin(*args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert needle in r.stderr and "attnd" in r.stderr, r.stderr


def test_bad_env_twin_exits_2_naming_it():
    r = run_bin(env={"ATTND_WORKERS": "many"})
    assert r.returncode == 2 and "ATTND_WORKERS" in r.stderr


def test_env_twins_and_flags_win():
    big = {"q": [[1.0, 0.0]] * 8, "k": SEED["k"], "v": SEED["v"]}
    with Attnd(env={"ATTND_MAX_BODY_BYTES": "100", "ATTND_MAX_ELEMENTS": "50"}) as a:
        assert a.post("/v1/attention", big).status == 413
        info = a.get("/v1/info").json()
        assert info["limits"]["max_body_bytes"] == 100 and info["limits"]["max_elements"] == 50
    with Attnd("--max-body-bytes", "100000", env={"ATTND_MAX_BODY_BYTES": "100"}) as a:
        assert a.post("/v1/attention", big).status == 200


def test_port_file_holds_the_bound_port(attnd):
    with open(attnd.port_file) as f:
        text = f.read()
    assert text.endswith("\n") and int(text) == attnd.port and attnd.port > 0
    s = connect(int(text), timeout=5)
    s.close()


def test_port_in_use_fails_cleanly(attnd):
    r = run_bin("--port", str(attnd.port), timeout=10)
    assert r.returncode == 1
    assert "cannot listen" in r.stdout


# ---- logs ------------------------------------------------------------------

def test_json_log_lines_never_hold_bodies_or_session_ids():
    with Attnd() as a:
        marker = 0.123456789123
        body = {"q": [[marker, 0]], "k": SEED["k"], "v": SEED["v"]}
        assert a.post("/v1/attention", body).status == 200
        s = a.post("/v1/sessions", {"d_k": 2, "d_v": 2})
        assert s.status == 201, s
        sid = s.json()["id"]
        assert a.get(f"/v1/sessions/{sid}").status == 200
        a.get("/nope")
        a.stop()
        text = a.logs()
    lines = [json.loads(x) for x in text.splitlines() if x.strip()]
    assert all({"ts", "level", "msg"} <= set(x) for x in lines)
    reqs = [x for x in lines if x["msg"] == "request"]
    assert len(reqs) >= 4
    for x in reqs:
        assert {"method", "route", "status", "bytes_in", "bytes_out", "us"} <= set(x), x
    att = [x for x in reqs if x["route"] == "/v1/attention"][0]
    assert att["method"] == "POST" and att["status"] == 200
    assert att["bytes_in"] == len(json.dumps(body)) and att["bytes_out"] > 0
    assert any(x["route"] == "/v1/sessions/{id}" for x in reqs)
    assert sid not in text and str(marker) not in text and "123456789" not in text
    assert any(x["msg"] == "listening" for x in lines)
    assert any(x["msg"].startswith("stopped") for x in lines)


def test_text_log_format():
    with Attnd("--log-format", "text") as a:
        a.get("/healthz")
        a.stop()
        text = a.logs()
    assert re.search(r"^\S+Z GET /healthz 200 in=0 out=\d+ \d+us id=[0-9a-f]{16}$", text,
                     re.M), text
    with pytest.raises(ValueError):
        json.loads(text.splitlines()[0])


def test_log_file_and_sighup_reopen(tmp_path):
    path = tmp_path / "attnd.log"
    with Attnd("--log-file", str(path)) as a:
        a.get("/healthz")
        os.rename(path, tmp_path / "attnd.log.1")         # what logrotate does
        a.signal(signal.SIGHUP)
        deadline = time.time() + 5
        while not path.exists() and time.time() < deadline:
            time.sleep(0.05)
        a.get("/readyz")
        a.stop()
    old = (tmp_path / "attnd.log.1").read_text()
    new = path.read_text()
    assert '"route":"/healthz"' in old and '"route":"/readyz"' in new


# ---- drain -----------------------------------------------------------------

def _mat(rng, n, d):
    return [[round(rng.uniform(-1, 1), 6) for _ in range(d)] for _ in range(n)]


def _read_response(sock):
    """One HTTP/1.1 response with Content-Length from a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before headers: %r" % data[:200])
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:])}
    n = int(hdrs["content-length"])
    while len(rest) < n:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed mid-body")
        rest += chunk
    return status, hdrs, rest[:n]


def test_sigterm_lets_a_slow_request_finish_then_exits_0():
    rng = random.Random(7)
    n, d = 300, 32
    body = json.dumps({"q": _mat(rng, n, d), "k": _mat(rng, n, d), "v": _mat(rng, n, d)}).encode()
    with Attnd("--drain-timeout", "20") as a:
        probe = http_connection(a.port, timeout=10)
        probe.request("GET", "/healthz")                   # a keep-alive connection
        assert probe.getresponse().read()
        s = connect(a.port, timeout=30)
        s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body[:-1000])
        time.sleep(0.3)
        a.signal(signal.SIGTERM)                          # the request is in flight
        time.sleep(0.3)
        assert a.proc.poll() is None, "exited with a request in flight"
        probe.request("GET", "/readyz")                   # draining: not ready, closing
        r = probe.getresponse()
        assert r.status == 503 and json.loads(r.read())["error"]["code"] == "draining"
        assert r.getheader("Connection", "").lower() == "close"
        with pytest.raises(OSError):                      # no new connections
            connect(a.port, timeout=2).recv(1)
        s.sendall(body[-1000:])
        status, hdrs, out = _read_response(s)
        assert status == 200, out[:300]
        res = json.loads(out)
        assert len(res["output"]) == n and len(res["weights"][0]) == n
        assert abs(sum(res["weights"][0]) - 1) < 1e-9
        assert a.wait(timeout=20) == 0
        logs = a.logs()
        assert "draining" in logs and "stopped (exit 0)" in logs


def test_requests_begun_while_draining_are_503_whatever_their_size():
    # A tiny POST /v1/attention is answered on the transport thread; begun
    # on an open connection after SIGTERM it is refused as a larger one is.
    tiny = json.dumps(SEED).encode()
    rng = random.Random(3)
    larger = json.dumps({"q": _mat(rng, 4, 32), "k": _mat(rng, 8, 32),
                         "v": _mat(rng, 8, 32)}).encode()
    assert len(tiny) < 2048 < len(larger)
    with Attnd("--drain-timeout", "20") as a:
        conns = []
        for _ in range(2):
            c = http_connection(a.port, timeout=10)
            c.request("GET", "/healthz")                   # kept alive
            assert c.getresponse().read()
            conns.append(c)
        s = a.drain_held_open(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\n"
                              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                              % len(tiny) + tiny[:-5])
        for c, body in zip(conns, (tiny, larger)):
            c.request("POST", "/v1/attention", body=body,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            out = json.loads(r.read())
            assert r.status == 503 and out["error"]["code"] == "draining", (len(body), out)
            assert r.getheader("Connection", "").lower() == "close"
        s.sendall(tiny[-5:])                              # the one in flight finishes
        status, _, out = _read_response(s)
        assert status == 200, out[:300]
        assert a.wait(timeout=20) == 0


def test_sigint_idle_exits_0_quickly():
    with Attnd() as a:
        t0 = time.time()
        a.signal(signal.SIGINT)
        assert a.wait(timeout=10) == 0
        assert time.time() - t0 < 5


def test_drain_timeout_cuts_a_stalled_upload():
    with Attnd("--drain-timeout", "1") as a:
        s = connect(a.port, timeout=10)
        s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"q\":")
        time.sleep(0.2)
        t0 = time.time()
        a.signal(signal.SIGTERM)
        assert a.wait(timeout=10) == 0
        assert time.time() - t0 < 5
        assert "drain timeout" in a.logs()
        s.close()


def test_concurrent_requests_all_answered(attnd):
    results = []

    def worker(i):
        body = {"q": [[1, 0]], "k": SEED["k"], "v": SEED["v"], "bias": {"q": [0, 1]} if i % 2 else {}}
        for _ in range(10):
            r = attnd.post("/v1/attention", body)
            results.append((i % 2, r.status, r.json()["weights"][0]))

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(results) == 80
    for odd, status, w in results:
        assert status == 200 and close(w, W_QBIAS if odd else W_PLAIN)


def test_state_dir_is_created_saved_on_drain_and_restored(tmp_path):
    sd = tmp_path / "state" / "nested"
    with Attnd("--state-dir", str(sd)) as a:
        assert sd.is_dir()
        r = a.post("/v1/sessions", {"d_k": 2, "d_v": 2})
        assert r.status == 201
        sid = r.json()["id"]
        assert a.post(f"/v1/sessions/{sid}/kv", {"k": SEED["k"], "v": SEED["v"]}).status == 200
        a.signal(signal.SIGTERM)
        assert a.wait(timeout=20) == 0
        assert "sessions saved" in a.logs()
    with Attnd("--state-dir", str(sd)) as a:
        r = a.get(f"/v1/sessions/{sid}")
        assert r.status == 200 and r.json()["length"] == 3
        out = a.post(f"/v1/sessions/{sid}/attention", {"q": SEED["q"]}).json()
        assert close(out["weights"][0], W_PLAIN)


def test_unwritable_state_dir_fails_at_start():
    r = run_bin("--port", "0", "--state-dir", "/proc/attnd-no-such-dir")
    assert r.returncode == 1
    assert "--state-dir" in r.stdout and "not a writable directory" in r.stdout
    # who it runs as: a container's volume is often another user's
    assert "(attnd runs as uid %d, gid %d)" % (os.getuid(), os.getgid()) in r.stdout


def test_a_journal_that_cannot_be_opened_points_at_the_cause(tmp_path):
    """The store logs the file and errno as a warning; the final error said
    "input/output error", as if the disk had failed."""
    sd = tmp_path / "state"
    (sd / "LOCK").mkdir(parents=True)
    r = run_bin("--port", "0", "--state-dir", str(sd), "--log-format", "text")
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    cause = [i for i, l in enumerate(lines) if " warn " in l and "LOCK: Is a directory" in l]
    final = [i for i, l in enumerate(lines) if " error " in l and "cannot open the journal" in l]
    assert cause and final and cause[0] < final[0], r.stdout
    assert "input/output error" not in r.stdout
    assert "the warnings before this line say which and why" in lines[final[0]], r.stdout


def test_a_state_dir_that_is_a_file_is_said_to_be_no_directory(tmp_path):
    f = tmp_path / "state"
    f.write_bytes(b"")
    for path in (f, f / "below"):
        r = run_bin("--port", "0", "--state-dir", str(path))
        assert r.returncode == 1
        assert f"--state-dir {path} is not a directory" in r.stdout, r.stdout
        assert "Permission denied" not in r.stdout


def test_head_and_content_types_of_static_files(attnd):
    r = attnd.request("HEAD", "/")
    assert r.status == 200 and r.body == b"" and r.headers["content-type"].startswith("text/html")
    web = os.path.join(os.path.dirname(__file__), "..", "..", "server", "web")
    want = {".css": "text/css", ".html": "text/html", ".json": "application/json"}
    for name in os.listdir(web):
        ext = os.path.splitext(name)[1]
        if ext in want:
            r = attnd.get("/" + name)
            assert r.status == 200 and r.headers["content-type"].startswith(want[ext]), name
            with open(os.path.join(web, name), "rb") as f:
                assert r.body == f.read(), name


def test_sighup_on_stdout_keeps_serving():
    with Attnd() as a:
        a.signal(signal.SIGHUP)
        time.sleep(0.2)
        assert a.get("/healthz").status == 200
        assert a.proc.poll() is None


def test_second_signal_during_drain_exits_at_once():
    with Attnd("--drain-timeout", "60") as a:
        s = connect(a.port, timeout=10)
        s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"q\":")
        time.sleep(0.2)
        a.signal(signal.SIGTERM)
        time.sleep(0.3)
        assert a.proc.poll() is None                      # waiting for the upload
        t0 = time.time()
        a.signal(signal.SIGTERM)
        assert a.wait(timeout=10) == 1
        assert time.time() - t0 < 5
        s.close()



def _big_sessions(a, sessions, heads, d, rows):
    """`sessions` float32 sessions of `rows` rows each (k and v alike, the
    same made-up values in each), appended 8192 rows a request."""
    chunk = 8192
    n = heads * chunk * d
    t = {"shape": [heads, chunk, d], "dtype": "float32", "data": base64.b64encode(
        struct.pack("<%df" % n, *(((i * 7919) % 4096) / 1024.0 - 2 for i in range(n)))).decode()}
    ids = []
    for _ in range(sessions):
        r = a.post("/v1/sessions", {"d_k": d, "d_v": d, "heads": heads, "kv_heads": heads,
                                    "dtype": "float32", "max_tokens": rows})
        assert r.status == 201, r
        ids.append(r.json()["id"])
        for _ in range(rows // chunk):
            r = a.post(f"/v1/sessions/{ids[-1]}/kv", {"k": t, "v": t}, timeout=120)
            assert r.status == 200, r
    return ids


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_during_the_final_snapshot(tmp_path, sig):
    """The drain's last step writes a snapshot (128 MiB here, half a second or
    more). A second SIGTERM then exits 1 at once; before, libuv had queued
    it, the snapshot went on and attnd exited 0. Nothing is lost: the
    journal holds every row, so the next start gives the same answers. A
    SIGHUP then (a log rotation's) neither ends attnd nor stops the
    snapshot: it exits 0 with its sessions saved."""
    heads, d, rows = 8, 128, 16384
    # no snapshot while the rows go in: the one seen is the drain's
    flags = ("--state-dir", str(tmp_path), "--max-cache-bytes", "1g",
             "--max-body-bytes", "256m", "--max-elements", "16m", "--snapshot-min-bytes", "100g")
    q = {"q": [[[((h * 31 + j) % 17) / 8.0 - 1 for j in range(d)]] for h in range(heads)],
         "encoding": "base64", "return": ["output"]}
    with Attnd(*flags) as a:
        ids = _big_sessions(a, 1, heads, d, rows)
        before = [a.post(f"/v1/sessions/{sid}/attention", q).json()["output"] for sid in ids]
        a.signal(signal.SIGTERM)
        sent = None
        while sent is None and a.proc.poll() is None:
            if any(n.startswith(".snapshot.") for n in os.listdir(tmp_path)):
                sent = time.time()
                a.signal(sig)
            time.sleep(0.001)
        assert sent is not None, "the final snapshot was never seen being written"
        if sig == signal.SIGTERM:
            assert a.wait(timeout=20) == 1
            assert time.time() - sent < 1.0
            assert "stopped (exit" not in a.logs()
        else:
            assert a.wait(timeout=60) == 0
            assert "sessions saved" in a.logs() and "stopped (exit 0)" in a.logs()
    with Attnd(*flags) as a:
        for sid, out in zip(ids, before):
            assert a.get(f"/v1/sessions/{sid}").json()["length"] == rows
            assert a.post(f"/v1/sessions/{sid}/attention", q).json()["output"] == out
        # the start's own snapshot is on disk: the cut one's temp file is gone
        assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")], os.listdir(tmp_path)


def _peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def test_costly_json_bodies_are_refused_unread():
    """Bodies under --max-body-bytes whose JSON holds tens of millions of
    tiny values ({}, [], 0: 2-3 bytes of text, 40-230 bytes of tree each)
    are refused with limit_exceeded before jansson reads them. Before, each
    was read whole first: attnd's peak went from 9 MB to 4-10 GB."""
    cases = [("/v1/attention", b'{"q":[[1]],"k":[[1]],"v":[[1]],"x":[', b"{},", 19_000_000),
             ("/v1/sessions", b'{"d_k":1,"d_v":1,"x":[', b"[],", 19_000_000),
             ("/v2/models/attention/infer", b'{"inputs":[],"x":[', b"0,", 29_000_000)]
    with Attnd() as a:
        for path, head, item, count in cases:
            body = head + item * count + b"1]}"
            assert len(body) < 64 << 20
            t0 = time.time()
            r = a.post(path, body, headers={"Content-Type": "application/json"}, timeout=60)
            assert r.status == (400 if path.startswith("/v2") else 422), (path, r)
            assert b"limit_exceeded" in r.body and b"MiB to read" in r.body, (path, r)
            assert time.time() - t0 < 10
        peak = _peak_rss_kib(a.proc.pid)
        assert peak < 1 << 20, f"attnd's peak resident memory reached {peak} KiB"
        assert a.get("/healthz").status == 200

def _on_pool(a):
    text = a.get("/metrics").body.decode()      # /metrics is answered off the pool
    return int(re.search(r"^attnd_requests_on_pool (\d+)$", text, re.M).group(1))


def test_probes_answer_while_every_worker_computes():
    """Probes are answered at once while the one worker computes. The
    probes start only once /metrics shows a request on the pool, so a fast
    machine cannot finish the big requests first. The requests are long in
    compute and short on the wire (n = L = 3000, d = 8: 9M scores each)."""
    rng = random.Random(3)
    n, d = 3000, 8
    body = json.dumps({"q": _mat(rng, n, d), "k": _mat(rng, n, d), "v": _mat(rng, n, d),
                       "dtype": "float64", "return": ["output"]}).encode()
    hdrs = {"Content-Type": "application/json"}
    with Attnd("--workers", "1") as a:
        done = []

        def big():
            done.append(a.post("/v1/attention", body, headers=hdrs, timeout=120).status)

        ts = [threading.Thread(target=big) for _ in range(8)]
        for t in ts:
            t.start()
        deadline = time.monotonic() + 60
        while _on_pool(a) < 1:                      # the worker is computing
            assert time.monotonic() < deadline and len(done) < 8, \
                "never saw the pool busy"
            time.sleep(0.002)
        lat = []
        for _ in range(5):
            t0 = time.time()
            assert a.get("/healthz").status == 200
            assert a.get("/readyz").status == 200
            lat.append(time.time() - t0)
        busy_after = _on_pool(a)
        for t in ts:
            t.join()
        assert done == [200] * 8
        assert max(lat) < 0.5, (lat, busy_after)

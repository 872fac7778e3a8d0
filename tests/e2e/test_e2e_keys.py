"""API keys from --api-key-file (rotated by SIGHUP) and per-key limits.

Keys are named (`name:key`); the log and /metrics carry the name, never the
key. --rate-limit is a token bucket per key (per address without one) and
--max-inflight-per-key caps requests in flight: over either, 429
rate_limited with Retry-After. A request is in flight from its headers on,
so a half-sent upload holds its key's slot deterministically.
"""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from attnd_proc import Attnd, BIN, connect

VALID = {"q": [[1, 0]], "k": [[1, 0], [0, 1]], "v": [[1, 2], [3, 4]]}
ALICE, BOB, CAROL = "alice-key-0123456789", "bob-key-abcdefghij", "carol-key-ZYXWVUT"


KEYS_DIR = []            # the module's directory for key files, made by the fixture


@pytest.fixture(scope="module", autouse=True)
def _key_files_dir():
    KEYS_DIR.append(tempfile.mkdtemp(prefix="attnd-keys-"))
    yield
    shutil.rmtree(KEYS_DIR.pop(), ignore_errors=True)


def key_file(text, mode=0o600):
    fd, path = tempfile.mkstemp(dir=KEYS_DIR[-1], prefix="keys-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def auth(key):
    return {"Authorization": f"Bearer {key}"}


def wait_log(a, words, timeout=10):
    deadline = time.time() + timeout
    while words not in a.logs():
        assert time.time() < deadline, f"no '{words}' in the log: {a.logs()[-2000:]}"
        time.sleep(0.05)


def metric(a, name, key, headers):
    text = a.get("/metrics", headers=headers).body.decode()
    m = re.search(r'^%s\{key="%s"\} (\d+)$' % (name, re.escape(key)), text, re.M)
    return int(m.group(1)) if m else 0


def test_named_keys_rotate_on_sighup():
    path = key_file(f"# attnd keys\nalice:{ALICE}\n\n bob : {BOB} \n")
    with Attnd("--api-key-file", path) as a:
        assert a.post("/v1/attention", VALID, headers=auth(ALICE)).status == 200
        assert a.post("/v1/attention", VALID, headers=auth(BOB)).status == 200
        r = a.post("/v1/attention", VALID, headers=auth(CAROL))
        assert r.status == 401 and r.json()["error"]["code"] == "unauthorized"
        assert a.get("/healthz").status == 200      # probes stay open
        assert a.get("/v1/info", headers=auth(ALICE)).json()["auth"] is True
        # rotate: bob goes, carol comes
        tmp = path + ".new"
        with open(tmp, "w") as f:
            f.write(f"alice:{ALICE}\ncarol:{CAROL}\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
        a.signal(signal.SIGHUP)
        wait_log(a, "API keys reloaded: 2")
        assert a.post("/v1/attention", VALID, headers=auth(CAROL)).status == 200
        assert a.post("/v1/attention", VALID, headers=auth(BOB)).status == 401
        # a broken file on reload keeps the keys in use
        with open(path, "w") as f:
            f.write("alice:has a space\n")
        a.signal(signal.SIGHUP)
        wait_log(a, "API key reload failed")
        assert a.post("/v1/attention", VALID, headers=auth(CAROL)).status == 200
        # counted when a request completes, which can come after its
        # client has read the answer: wait for it
        deadline = time.time() + 10
        while metric(a, "attnd_key_requests_total", "carol", auth(CAROL)) < 2:
            assert time.time() < deadline, "carol's two answered requests not counted"
            time.sleep(0.05)
        wait_log(a, '"key":"alice"')
        wait_log(a, '"key":"carol"')
        logs = a.logs()
        for secret in (ALICE, BOB, CAROL):
            assert secret not in logs


def test_api_key_flag_and_file_together():
    path = key_file(f"{BOB}\n")
    with Attnd("--api-key-file", path, "--api-key", ALICE) as a:
        assert a.post("/v1/attention", VALID, headers=auth(ALICE)).status == 200
        assert a.post("/v1/attention", VALID, headers=auth(BOB)).status == 200
        assert a.post("/v1/attention", VALID, headers=auth(ALICE[:-1])).status == 401
        assert a.post("/v1/attention", VALID, headers=auth(ALICE + "x")).status == 401
        wait_log(a, '"key":"default"')
        wait_log(a, '"key":"key-1"')


def test_a_wrong_token_is_told_from_a_missing_one():
    # RFC 6750 section 3: error="invalid_token" when a Bearer token was sent
    # and is not a key; no error code when none was, nor for another scheme
    path = key_file(f"alice:{ALICE}\n")
    bare = 'Bearer realm="attnd"'
    with Attnd("--api-key-file", path) as a:
        for method, route, body in (("POST", "/v1/attention", VALID), ("GET", "/v1/info", None),
                                    ("GET", "/v1/nope", None), ("GET", "/metrics", None),
                                    ("POST", "/v2/models/attention/infer", {})):
            for hdr, want in (({}, bare), (auth(BOB), bare + ', error="invalid_token"'),
                              ({"Authorization": "bearer " + BOB}, bare + ', error="invalid_token"'),
                              ({"Authorization": "Basic YTpi"}, bare)):
                r = a.request(method, route, body=body, headers=hdr)
                assert r.status == 401, (method, route, hdr, r)
                assert r.headers["www-authenticate"] == want, (method, route, hdr, r.headers)
        assert a.get("/v1/info", headers=auth(ALICE)).status == 200


def test_bad_key_files_exit_2():
    cases = [
        (key_file(f"alice:{ALICE}\n", 0o644), "mode 0644 lets other users read it"),
        (key_file(f"alice:{ALICE}\n", 0o602), "mode 0602 lets other users change it"),
        (key_file(f"alice:{ALICE}\n", 0o606), "lets other users read and change it"),
        (key_file(f"alice:{ALICE}\nalice:{BOB}\n"), "used twice"),
        (key_file(f"alice:{ALICE}\nbob:{ALICE}\n"), "same key appears twice"),
        (key_file("al ice:x\n"), "a name is"),
        # "-" is the metrics' label of the clients without a key: a key of
        # that name had no attnd_key_requests_total series and its 429s
        # were counted as theirs
        (key_file(f"-:{ALICE}\n"), "the name '-' is taken"),
        (key_file(f"other:{ALICE}\n"), "the name 'other' is taken"),
        (key_file("alice:\n"), "a key is"),
        (key_file("# nothing\n\n"), "no keys"),
        ("/nonexistent/keys", "No such file"),
    ]
    for path, words in cases:
        p = subprocess.run([BIN, "--port", "0", "--api-key-file", path],
                           capture_output=True, text=True, timeout=20)
        assert p.returncode == 2, (path, p.returncode, p.stdout, p.stderr)
        assert words in p.stdout + p.stderr, (words, p.stdout, p.stderr)


def test_a_group_readable_key_file_is_accepted_silently():
    """0640, and 0440 as a Kubernetes Secret mounted with defaultMode: 0440
    for the pod's fsGroup, are group-readable by design: no warning."""
    for mode in (0o640, 0o440):
        path = key_file(f"alice:{ALICE}\n", mode)
        with Attnd("--api-key-file", path) as a:
            assert a.post("/v1/attention", VALID, headers=auth(ALICE)).status == 200
            logs = a.logs()
            assert '"level":"warn"' not in logs and "group" not in logs, (oct(mode), logs)


def test_a_world_readable_key_file_names_chmod_and_defaultmode():
    path = key_file(f"alice:{ALICE}\n", 0o644)        # a Secret's default mode
    p = subprocess.run([BIN, "--port", "0", "--api-key-file", path],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 2, (p.stdout, p.stderr)
    out = p.stdout + p.stderr
    assert "chmod 600 (or 640) it" in out and "defaultMode: 0440" in out, out


def test_whitespace_after_the_token_is_ignored():
    """RFC 9110 5.5: a field value excludes the whitespace around it (a
    credentials file with a newline, a shell script's stray space)."""
    path = key_file(f"alice:{ALICE}\n")
    with Attnd("--api-key-file", path, "--rate-limit", "1000") as a:
        for tail in ("   ", "\t", " \t "):
            r = a.post("/v1/attention", VALID, headers={"Authorization": f"Bearer {ALICE}{tail}"})
            assert r.status == 200, (repr(tail), r)
        for bad in (f"{ALICE} x", f"{ALICE}x ", ALICE[:-1] + " "):
            r = a.post("/v1/attention", VALID, headers={"Authorization": f"Bearer {bad}"})
            assert r.status == 401, (bad, r)
        wait_log(a, '"key":"alice"')


def test_rate_limit_per_key_with_retry_after():
    path = key_file(f"alice:{ALICE}\nbob:{BOB}\n")
    with Attnd("--api-key-file", path, "--rate-limit", "0.5", "--rate-burst", "3") as a:
        codes = [a.post("/v1/attention", VALID, headers=auth(ALICE)).status for _ in range(3)]
        assert codes == [200, 200, 200]
        r = a.post("/v1/attention", VALID, headers=auth(ALICE))
        assert r.status == 429, r
        assert r.json()["error"]["code"] == "rate_limited"
        assert 1 <= int(r.headers["retry-after"]) <= 2      # one token per 2 s
        assert a.post("/v1/attention", VALID, headers=auth(BOB)).status == 200   # own bucket
        assert a.get("/healthz").status == 200              # probes are not limited
        assert metric(a, "attnd_rate_limited_total", "alice", auth(BOB)) == 1
        time.sleep(2.1)
        assert a.post("/v1/attention", VALID, headers=auth(ALICE)).status == 200


def test_rate_limit_per_address_without_keys():
    with Attnd("--rate-limit", "0.2", "--rate-burst", "2") as a:
        assert [a.get("/v1/info").status for _ in range(3)] == [200, 200, 429]
        assert metric(a, "attnd_rate_limited_total", "-", {}) == 1


def test_a_429_without_a_body_keeps_the_connection():
    """A request without a body refused 429 (a GET polled over keep-alive)
    is answered on a connection that stays open, as one with a body is:
    closing it made a limited client reconnect (a TLS handshake each, over
    HTTPS) for every retry, more work for the server it was slowed for."""
    path = key_file(f"alice:{ALICE}\n")
    get = (b"GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
           + ALICE.encode() + b"\r\n\r\n")
    with Attnd("--api-key-file", path, "--rate-limit", "0.1", "--rate-burst", "1") as a:
        s = connect(a.port)
        statuses = []
        for _ in range(3):
            s.sendall(get)
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                c = s.recv(1)
                assert c, f"closed after {statuses}: {head!r}"
                head += c
            assert b"connection: close" not in head.lower(), head
            n = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
            body = b""
            while len(body) < n:
                body += s.recv(n - len(body))
            statuses.append(int(head.split()[1]))
        s.close()
        assert statuses == [200, 429, 429], statuses
        assert metric(a, "attnd_rate_limited_total", "alice", auth(ALICE)) == 2


def test_cors_preflights_are_not_rate_limited():
    """A browser sends a preflight (OPTIONS, no key) before each keyed
    POST: preflights neither use up the page's address's tokens nor get a
    429 without the CORS headers the browser needs."""
    origin = "https://demo.example"
    pre = {"Origin": origin, "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization, content-type"}
    with Attnd("--api-key", ALICE, "--cors-origins", origin, "--rate-limit", "0.2",
               "--rate-burst", "2") as a:
        for _ in range(6):
            r = a.request("OPTIONS", "/v1/attention", headers=pre)
            assert r.status == 204, r
            assert r.headers["access-control-allow-origin"] == origin
            assert "POST" in r.headers["access-control-allow-methods"]
        codes = [a.post("/v1/attention", VALID, headers={**auth(ALICE), "Origin": origin}).status
                 for _ in range(3)]
        assert codes == [200, 200, 429]
    # an OPTIONS with a body is held like any upload: it stays under the limits
    with Attnd("--rate-limit", "0.2", "--rate-burst", "2") as a:
        codes = [a.request("OPTIONS", "/v1/attention", b"{}" * 1000,
                           headers={"Content-Type": "application/json"}).status
                 for _ in range(3)]
        assert codes[2] == 429, codes


def hold_alices_slot(a, timeout=10):
    """Opens a half-sent upload of alice's and returns it with the first 429
    another request of alice's gets while it is in flight. A probe request
    admitted before the server has read the upload's headers takes the slot
    itself, and the upload is the one refused (counted at once; answered
    429 once its body has been read and dropped): then the upload is
    opened again."""
    head = (f"POST /v1/attention HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
    deadline = time.time() + timeout
    refused = metric(a, "attnd_rate_limited_total", "alice", auth(BOB))
    s = r = None
    while time.time() < deadline:
        if s is None:
            s = connect(a.port)
            s.sendall(head.encode())
        r = a.post("/v1/attention", VALID, headers=auth(ALICE))
        if r.status == 429:
            return s, r         # the upload holds the slot
        now = metric(a, "attnd_rate_limited_total", "alice", auth(BOB))
        if now != refused:      # the upload was refused in the probe's place
            refused = now
            s.close()
            s = None
        time.sleep(0.05)
    return s, r


def test_max_inflight_per_key():
    path = key_file(f"alice:{ALICE}\nbob:{BOB}\n")
    with Attnd("--api-key-file", path, "--max-inflight-per-key", "1") as a:
        s, r = hold_alices_slot(a)
        assert r.status == 429 and r.json()["error"]["code"] == "rate_limited", r
        assert r.headers["retry-after"] == "1"
        assert a.post("/v1/attention", VALID, headers=auth(BOB)).status == 200
        s.close()
        deadline = time.time() + 10
        while a.post("/v1/attention", VALID, headers=auth(ALICE)).status != 200:
            assert time.time() < deadline, "alice's slot was not given back"
            time.sleep(0.05)


@pytest.mark.parametrize("line, key", [
    ("POST /v1/attention", None),           # 401
    ("OPTIONS /v1/attention", None),        # a preflight's 204
    ("POST /healthz", None),                # 405 on an open route
    ("POST /no/such/route", None),          # 404
    ("GET /v1/info", ALICE),                # a GET's body: never read
])
def test_bodies_the_api_never_reads_hold_no_room_for_others(line, key):
    """Bodies are held within a budget over all connections (8 bodies of
    --max-body-bytes, at least 256 MiB), an announced one reserved at its
    headers. A body the answer does not depend on (a client without a key,
    a preflight, a 404 or 405, a GET) is dropped as it arrives, never held:
    else eight such uploads, trickled, kept every keyed request with a body
    refused 503 capacity_exhausted."""
    path = key_file(f"alice:{ALICE}\n")
    with Attnd("--api-key-file", path, "--max-body-bytes", "32m") as a:
        head = (f"{line} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + (f"Authorization: Bearer {key}\r\n" if key else "")
                + "Content-Length: 33554432\r\n\r\n{").encode()
        held = []
        try:
            for _ in range(8):
                held.append(connect(a.port))
                held[-1].sendall(head)
            deadline = time.time() + 10
            while a.metric("attnd_requests_in_flight", headers=auth(ALICE)) < 9:
                assert time.time() < deadline, "the uploads were not read"
                time.sleep(0.02)
            r = a.post("/v1/attention", VALID, headers=auth(ALICE))
            assert r.status == 200, r
        finally:
            for s in held:
                s.close()


def test_a_body_without_a_key_is_answered_401_and_the_connection_stays():
    """A request without a key whose body is dropped is answered 401 with
    WWW-Authenticate once the body has arrived, and the connection serves
    the next request; a chunked body likewise."""
    path = key_file(f"alice:{ALICE}\n")
    body = b'{"q":[[1,0]],"k":[[1,0]],"v":[[1,2]]}'
    with Attnd("--api-key-file", path) as a:
        for framing, sent in ((b"Content-Length: %d\r\n" % len(body), body),
                              (b"Transfer-Encoding: chunked\r\n",
                               b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))):
            s = connect(a.port)
            s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\n" + framing + b"\r\n" + sent +
                      b"GET /v1/info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      b"Authorization: Bearer " + ALICE.encode() + b"\r\n\r\n")
            got = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                got += d
            s.close()
            first, _, rest = got.partition(b"HTTP/1.1 200 OK\r\n")
            assert first.startswith(b"HTTP/1.1 401 "), got
            assert b'WWW-Authenticate: Bearer realm="attnd"' in first, got
            assert b'"code":"unauthorized"' in first, got
            assert b'"auth":true' in rest, got

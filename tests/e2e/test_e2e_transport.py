"""tests/e2e/test_e2e_transport.py — HTTP framing on the real daemon, byte by byte.

Raw sockets, so the tests see what a hostile or sloppy client sees: body caps
with Content-Length (answered before the body is sent when it is over 16 MiB,
else once it has been read and dropped: tests/e2e/test_e2e_refused_bodies.py)
and chunked, bodies exactly at the cap, Content-Length with Transfer-Encoding, unknown transfer
codings, conflicting Content-Length, Expect: 100-continue, absolute-form
targets, keep-alive kept over several requests (and closed after an early refusal), idle timeouts,
per-address connection limits, and a server that keeps serving after all of it.
HEAD on every GET route is GET's answer without a byte of body.
"""
import json
import os
import re
import socket
import ssl
import time

import pytest

import attnd_proc
from attnd_proc import Attnd

SEED = {"q": [[1, 0]], "k": [[1, 0], [0, 1], [-1, 0]], "v": [[1, 0], [0, 1], [0, 0]]}
W_PLAIN = [0.575975, 0.283995, 0.140029]
CAP = 4096


@pytest.fixture(scope="module")
def small():
    """attnd with a small body cap."""
    with Attnd("--max-body-bytes", str(CAP)) as a:
        yield a


def connect(a, timeout=10):
    return attnd_proc.connect(a.port, timeout=timeout)


def read_response(sock, to_head=False):
    """(status, headers, body) of one response framed by Content-Length
    (to_head: the answer to a HEAD, which has no body whatever its
    Content-Length says). Reads the head byte by byte so a pipelined next
    response stays unread."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        c = sock.recv(1)
        if not c:
            raise ConnectionError("closed before headers: %r" % head[:200])
        head += c
    lines = head[:-4].decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for x in lines[1:]:
        k, v = x.split(":", 1)
        hdrs[k.strip().lower()] = v.strip()
    n = 0 if to_head else int(hdrs.get("content-length", "0"))
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            raise ConnectionError("closed mid-body")
        body += chunk
    return status, hdrs, body


def closed_by_peer(sock, wait=3.0):
    sock.settimeout(wait)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def post_head(path="/v1/attention", extra=b""):
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n" + extra)


def chunked(body, size=100):
    out = b""
    for i in range(0, len(body), size):
        part = body[i:i + size]
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"


def json_error(status, hdrs, body, want_status, want_code):
    assert status == want_status, (status, body[:200])
    assert hdrs["content-type"].startswith("application/json"), hdrs
    err = json.loads(body)["error"]
    assert err["code"] == want_code, err
    assert err["message"]


def still_serving(a):
    r = a.post("/v1/attention", SEED)
    assert r.status == 200
    assert all(abs(x - y) < 1e-6 for x, y in zip(r.json()["weights"][0], W_PLAIN))


# ---- body caps ---------------------------------------------------------------

def test_content_length_far_over_cap_answered_before_the_body(small):
    s = connect(small)
    s.sendall(post_head(extra=b"Content-Length: %d\r\n\r\n" % 10**10))   # no body sent
    status, hdrs, body = read_response(s)
    json_error(status, hdrs, body, 413, "body_too_large")
    assert hdrs.get("connection", "").lower() == "close"
    assert closed_by_peer(s)
    still_serving(small)


def test_huge_content_length_is_413_not_an_allocation(small):
    s = connect(small)
    s.sendall(post_head(extra=b"Content-Length: 99999999999999999\r\n\r\n"))
    json_error(*read_response(s), 413, "body_too_large")
    s = connect(small)
    s.sendall(post_head(extra=b"Content-Length: 99999999999999999999999999\r\n\r\n"))
    status, _, _ = read_response(s)
    assert status in (400, 413)
    still_serving(small)


def test_expect_100_continue_over_cap_gets_413_without_continue(small):
    s = connect(small)
    s.sendall(post_head(extra=b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (10 * CAP)))
    status, hdrs, body = read_response(s)
    json_error(status, hdrs, body, 413, "body_too_large")


def test_chunked_over_cap_is_413(small):
    s = connect(small)
    big = b'{"q":[' + b"[1,0]," * CAP + b"[1,0]]}"
    s.sendall(post_head(extra=b"Transfer-Encoding: chunked\r\n\r\n") + chunked(big, 1000))
    json_error(*read_response(s), 413, "body_too_large")
    still_serving(small)


def test_endless_chunked_upload_is_cut_off(small):
    s = connect(small, timeout=30)
    s.sendall(post_head(extra=b"Transfer-Encoding: chunked\r\n\r\n"))
    chunk = b"%x\r\n" % 65536 + b" " * 65536 + b"\r\n"
    sent = 0
    try:
        for _ in range(2000):                 # up to 128 MB; the server stops reading far sooner
            s.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
        pass
    assert sent < 64 * 1024 * 1024, "server kept reading an endless upload"
    still_serving(small)


def test_body_exactly_at_the_cap_is_accepted(small):
    body = json.dumps(SEED).encode()
    body += b" " * (CAP - len(body))
    assert len(body) == CAP
    s = connect(small)
    s.sendall(post_head(extra=b"Content-Length: %d\r\n\r\n" % CAP) + body)
    status, _, out = read_response(s)
    assert status == 200, out[:200]
    s = connect(small)
    s.sendall(post_head(extra=b"Transfer-Encoding: chunked\r\n\r\n") + chunked(body, 333))
    status, _, out = read_response(s)
    assert status == 200, out[:200]
    s = connect(small)
    s.sendall(post_head(extra=b"Content-Length: %d\r\n\r\n" % (CAP + 1)) + body + b" ")
    assert read_response(s)[0] == 413


def test_chunked_body_is_reassembled(small):
    s = connect(small)
    s.sendall(post_head(extra=b"Transfer-Encoding: chunked\r\n\r\n") + chunked(json.dumps(SEED).encode(), 7))
    status, _, out = read_response(s)
    assert status == 200
    w = json.loads(out)["weights"][0]
    assert all(abs(x - y) < 1e-6 for x, y in zip(w, W_PLAIN))


# ---- framing faults ------------------------------------------------------------

@pytest.mark.parametrize("extra", [
    b"Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"Transfer-Encoding: chunked\r\nContent-Length: 6\r\n\r\n0\r\n\r\n",
    b"Transfer-Encoding: gzip\r\n\r\nxxxx",
    b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}",
    b"Content-Length: -1\r\n\r\n",
    b"Content-Length: 1e3\r\n\r\n",
], ids=["cl_te", "te_cl", "gzip", "gzip_chunked", "te_twice", "cl_conflict", "cl_negative", "cl_float"])
def test_bad_framing_is_json_400(small, extra):
    s = connect(small)
    s.sendall(post_head(extra=extra))
    status, hdrs, body = read_response(s)
    assert status == 400, body[:200]
    if body:                                  # ours: JSON; MHD's own refusals may be plain
        try:
            err = json.loads(body)["error"]
        except ValueError:
            err = None
        if err is not None:
            assert err["code"] == "bad_request"
    still_serving(small)


@pytest.mark.parametrize("name", [b"Idempotency-Key", b"Authorization"])
def test_a_single_header_with_two_values_is_400(small, name):
    """Idempotency-Key and Authorization are single values: two lines that
    differ are 400 and make nothing (the first is not taken silently);
    the same value twice is that value, whitespace after it not counted
    (RFC 9110 5.5, as api/ reads the value)."""
    before = small.metric("attnd_sessions")
    body = b'{"d_k":2,"d_v":2}'
    lower = name.lower()
    for extra, want in ((b"%s: a1\r\n%s: b1\r\n" % (name, name), 400),
                        (b"%s: a1\r\n%s: b1\r\n" % (name, lower), 400),
                        (b"%s: t1\r\n%s: t1\r\n" % (name, name), 201),
                        (b"%s: t2\r\n%s: t2 \t\r\n" % (name, name), 201),
                        (b"%s: t3\r\n%s: t3x\r\n" % (name, name), 400)):
        s = connect(small)
        s.sendall(post_head("/v1/sessions", extra + b"Content-Length: %d\r\n\r\n" % len(body))
                  + body)
        status, hdrs, answer = read_response(s)
        s.close()
        if want == 400:
            json_error(status, hdrs, answer, 400, "bad_request")
            assert name.decode() in json.loads(answer)["error"]["message"]
        else:
            assert status == 201, answer[:200]
            before += 1
    assert small.metric("attnd_sessions") == before
    still_serving(small)


def test_bad_framing_is_400_on_every_documented_operation(small):
    # the transport refuses it before any route, static files and probes
    # included; each answer is recorded, so the suite's last test holds it
    # to the document's 400 of that operation
    path = os.path.join(os.path.dirname(__file__), "..", "..", "server", "web", "openapi.json")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    for template, item in doc["paths"].items():
        concrete = template.replace("{id}", "0123456789abcdef").replace("{version}", "1")
        for method, op in item.items():
            if method not in ("get", "post", "delete"):
                continue
            assert "400" in op["responses"], (method, template)
            s = connect(small)
            s.sendall(b"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\nxxxx"
                      % (method.upper().encode(), concrete.encode()))
            status, hdrs, body = read_response(s)
            s.close()
            assert status == 400, (method, template, body[:200])
            attnd_proc.record(method.upper(), concrete, status, hdrs, body)
    still_serving(small)


def test_transport_errors_are_logged_and_counted(small):
    def count():
        total = 0.0
        for line in small.get("/metrics").body.decode().splitlines():
            if line.startswith("attnd_requests_total{") and 'code="413"' in line:
                total += float(line.split()[-1])
        return total
    before = count()
    s = connect(small)
    s.sendall(post_head(extra=b"Content-Length: %d\r\n\r\n" % (CAP * 2)) + b" " * (CAP * 2))
    assert read_response(s)[0] == 413
    # Counted in MHD's completion callback, after the answer is sent: a scrape
    # served by the other HTTP thread can come a moment before it.
    deadline = time.monotonic() + 2
    after = count()
    while after < before + 1 and time.monotonic() < deadline:
        time.sleep(0.01)
        after = count()
    time.sleep(0.05)                                  # and it is counted once
    assert count() == after == before + 1


# ---- connections ---------------------------------------------------------------

def test_keep_alive_serves_several_requests_on_one_connection(small):
    s = connect(small)
    body = json.dumps(SEED).encode()
    for i in range(3):
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        status, hdrs, _ = read_response(s)
        assert status == 200 and hdrs.get("connection", "").lower() != "close"
        s.sendall(post_head(extra=b"Content-Length: %d\r\n\r\n" % len(body)) + body)
        status, hdrs, out = read_response(s)
        assert status == 200 and hdrs.get("connection", "").lower() != "close"
        assert json.loads(out)["meta"]["L"] == 3
    # errors the api answers keep the connection too
    s.sendall(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_response(s)[0] == 404
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_response(s)[0] == 200


def test_pipelined_requests_answered_in_order(small):
    s = connect(small)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
              b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert [read_response(s)[0] for _ in range(3)] == [200, 404, 200]


def test_absolute_form_targets_are_served_as_their_path(small):
    # RFC 9112 3.2.2: a server MUST accept the absolute-form of a request
    # target (what clients send to a proxy, and some to a server).
    s = connect(small)
    body = json.dumps(SEED).encode()
    host = b"127.0.0.1:%d" % small.port
    s.sendall(b"GET http://" + host + b"/healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, out = read_response(s)
    assert status == 200 and json.loads(out) == {"status": "ok"}, out
    s.sendall(post_head("HTTPS://" + host.decode() + "/v1/attention",
                        b"Content-Length: %d\r\n\r\n" % len(body)) + body)
    status, _, out = read_response(s)
    assert status == 200, out[:200]
    assert all(abs(x - y) < 1e-6 for x, y in zip(json.loads(out)["weights"][0], W_PLAIN))
    s.sendall(b"GET http://" + host + b" HTTP/1.1\r\nHost: x\r\n\r\n")   # no path: "/"
    status, hdrs, _ = read_response(s)
    assert status == 200 and hdrs["content-type"].startswith("text/html")
    s.sendall(b"GET http://" + host + b"/nope HTTP/1.1\r\nHost: x\r\n\r\n")
    status, hdrs, out = read_response(s)
    json_error(status, hdrs, out, 404, "not_found")
    assert "/nope" in json.loads(out)["error"]["message"]
    assert "http:" not in json.loads(out)["error"]["message"]


# ---- HEAD ----------------------------------------------------------------------

def test_head_is_get_without_the_body_on_every_get_route(small):
    # RFC 9110 9.3.2: HEAD answers what GET would, the same status and
    # header fields, and no body. A GET /healthz pipelined after each HEAD
    # is read right after the HEAD's headers: not a byte of body came
    # between. Routes: the document's GET operations (a session with rows
    # for {id}) and every static file.
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(root, "server", "web", "openapi.json"), encoding="utf-8") as f:
        doc = json.load(f)
    r = small.post("/v1/sessions", {"d_k": 2, "d_v": 2, "heads": 2})
    assert r.status == 201, r
    sid = r.json()["id"]
    rows = [[[1, 0], [0.5, -2]], [[0, 1], [3, 0.25]]]
    assert small.post(f"/v1/sessions/{sid}/kv", {"k": rows, "v": rows}).status == 200
    paths = [t.replace("{id}", sid).replace("{version}", "1")
             for t, item in doc["paths"].items() if "get" in item]
    paths += ["/" + name for name in sorted(os.listdir(os.path.join(root, "server", "web")))]
    # counters, timings and a session's expires_in_s: their lengths move
    varying = {"/metrics", "/v1/verify", "/verify", f"/v1/sessions/{sid}"}
    s = connect(small)
    for path in paths:
        s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
        g_status, g_hdrs, g_body = read_response(s)
        s.sendall(b"HEAD %s HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                  % path.encode())
        status, hdrs, _ = read_response(s, to_head=True)
        attnd_proc.record("HEAD", path, status, hdrs, None)
        assert status == g_status == 200, (path, status, g_status)
        assert hdrs.get("content-type") == g_hdrs.get("content-type"), (path, hdrs)
        assert "content-length" in hdrs and "content-length" in g_hdrs, (path, hdrs)
        if path not in varying:
            assert int(hdrs["content-length"]) == len(g_body), (path, hdrs)
        status, _, body = read_response(s)
        assert status == 200 and json.loads(body) == {"status": "ok"}, (path, body[:200])
    s.close()
    assert small.request("DELETE", f"/v1/sessions/{sid}").status == 204


def test_idle_connection_times_out():
    with Attnd("--conn-timeout", "1") as a:
        s = connect(a)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(s)[0] == 200
        t0 = time.time()
        assert closed_by_peer(s, wait=6)
        assert time.time() - t0 < 5
        half = connect(a)
        half.sendall(b"GET /healthz HTTP/1.1\r\nHo")      # a stalled header
        assert closed_by_peer(half, wait=6)
        assert a.get("/healthz").status == 200


def open_connections(sock):
    """attnd_connections_open, read over the kept-alive connection sock."""
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, body = read_response(sock)
    assert status == 200
    for line in body.decode().splitlines():
        if line.startswith("attnd_connections_open "):
            return float(line.split()[-1])
    raise AssertionError("no attnd_connections_open in /metrics")


def only_this_connection(sock, timeout=5.0):
    """Wait until the server has closed every connection but sock (the
    readiness probe's close is noticed by whichever transport thread held it,
    not necessarily before the next accept)."""
    deadline = time.time() + timeout
    while open_connections(sock) != 1:
        assert time.time() < deadline, "connections from earlier clients still open"
        time.sleep(0.01)
    time.sleep(0.05)    # the per-address count drops just after the gauge


def test_connections_gauge_counts_open_connections(small):
    s = connect(small)
    only_this_connection(s)
    others = [connect(small) for _ in range(3)]
    for o in others:
        o.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(o)[0] == 200
    assert open_connections(s) == 4
    for o in others:
        o.close()
    only_this_connection(s)


def test_per_address_connection_limit():
    with Attnd("--max-connections-per-ip", "4") as a:
        held = [connect(a)]
        only_this_connection(held[0])
        held += [connect(a) for _ in range(3)]
        for h in held:
            h.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(h)[0] == 200
        try:                    # over TLS the handshake is what gets cut off
            extra = connect(a)
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            refused = closed_by_peer(extra, wait=3)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            refused = True
        assert refused, "a fifth connection from one address was served"
        # the log names the cap that refused it (MHD says "Server reached
        # connection limit" for either, and behind a proxy that decides
        # what to change)
        deadline = time.time() + 5
        while "refused" not in a.logs() and time.time() < deadline:
            time.sleep(0.05)
        logs = a.logs()
        assert "connection from 127.0.0.1 refused: 4 open from that address, " \
               "--max-connections-per-ip 4" in logs, logs[-2000:]
        assert "Server reached connection limit" not in logs
        for h in held:
            h.close()
        time.sleep(0.3)
        assert a.get("/healthz").status == 200


@pytest.mark.parametrize("lines, status", [(128, 200), (129, 400)])
def test_header_lines_at_and_past_their_cap(small, lines, status):
    # Host, Content-Length and Content-Type (last, where a cap that kept
    # the first lines only would lose it) and fillers up to `lines` lines
    body = json.dumps(SEED).encode()
    filler = b"".join(b"X-Filler-%d: v\r\n" % i for i in range(lines - 3))
    s = connect(small)
    s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % len(body) +
              filler + b"Content-Type: application/json\r\n\r\n" + body)
    got, hdrs, out = read_response(s)
    if status == 200:
        assert got == 200, out[:200]
    else:
        json_error(got, hdrs, out, 400, "bad_request")
        assert "128 header lines" in json.loads(out)["error"]["message"]
    still_serving(small)


def test_client_vanishing_mid_upload_is_freed(small):
    for _ in range(5):
        s = connect(small)
        s.sendall(post_head(extra=b"Content-Length: 4000\r\n\r\n") + b'{"q":[[1,')
        s.close()                                         # FIN mid-body
        h = connect(small)
        h.sendall(b"GET /healthz HTTP/1.1\r\nHo")
        h.close()                                         # FIN mid-header
    time.sleep(0.5)
    text = small.get("/metrics").body.decode()
    inflight = [float(x.split()[-1]) for x in text.splitlines() if x.startswith("attnd_requests_in_flight ")]
    assert inflight == [1.0], "half-closed uploads still count as in flight"
    still_serving(small)


def test_clients_gone_mid_request_are_logged_a_line_a_second():
    """A client that closes with its request half sent (a timeout, a
    scanner) made libmicrohttpd log a warn line each ("Connection was
    closed by remote side with incomplete request."; over TLS "Socket has
    been disconnected when reading request."): a line per connection, for
    as many connections as a client cares to open. The log says them at
    most once a second with the count since, as it does for the failed
    TLS handshakes and the connection caps' refusals."""
    with Attnd() as a:
        t0 = time.monotonic()
        for i in range(30):
            s = attnd_proc.connect(a.port)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHo" if i % 2 else
                      post_head(extra=b"Content-Length: 4000\r\n\r\n") + b'{"q":[[1,')
            s.close()
        spent = time.monotonic() - t0
        assert a.get("/healthz").status == 200
        time.sleep(1.1)
        for _ in range(3):                            # the count of the quiet second
            s = attnd_proc.connect(a.port)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHo")
            s.close()
        deadline = time.monotonic() + 10
        while (a.logs().count("before its request was whole") < 2 and
               time.monotonic() < deadline):
            time.sleep(0.05)
        lines = [l for l in a.logs().splitlines() if '"level":"warn"' in l]
        assert all("before its request was whole" in l for l in lines), lines
        assert 2 <= len(lines) <= 2 + int(spent) + 1, lines
        more = sum(int(re.search(r"; (\d+) more since", l).group(1)) for l in lines)
        assert more + len(lines) >= 30, lines        # every one counted


def test_huge_header_and_uri_are_refused_cleanly(small):
    s = connect(small)
    try:                        # over TLS the early close can cut the send itself
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n")
        status, _, _ = read_response(s)
        assert 400 <= status < 500
    except (ConnectionError, OSError):
        pass
    s = connect(small)
    try:
        s.sendall(b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, _ = read_response(s)
        assert 400 <= status < 500
    except (ConnectionError, OSError):
        pass
    still_serving(small)


def test_bodies_in_flight_share_a_bounded_budget():
    # budget: 8 x --max-body-bytes (at least 256 MiB): 8 announced 40 MiB bodies fill it
    with Attnd("--max-body-bytes", "40m") as a:
        held = []
        for _ in range(8):
            h = connect(a)
            h.sendall(post_head(extra=b"Content-Length: %d\r\n\r\n" % (40 << 20)) + b'{"q":')
            held.append(h)
        time.sleep(0.3)
        s = connect(a)
        # refused from its headers, answered once the body is read and dropped
        s.sendall(post_head(extra=b"Content-Length: %d\r\n\r\n" % (40 << 20)) +
                  b" " * (40 << 20))
        status, hdrs, body = read_response(s)
        json_error(status, hdrs, body, 503, "capacity_exhausted")
        assert hdrs.get("retry-after")
        small_body = json.dumps(SEED).encode()
        for h in held:
            h.close()
        time.sleep(0.5)
        s = connect(a)
        s.sendall(post_head(extra=b"Content-Length: %d\r\n\r\n" % len(small_body)) + small_body)
        assert read_response(s)[0] == 200               # the budget came back


def test_concurrency_short_connections_on_the_pool_keep_the_daemon_whole():
    # The pool thread hands each answer to MHD before the loop stops the
    # request's hang-up watch, so MHD may close a socket, and a new
    # connection reuse its number, while the watch still polls it: the watch
    # polls its own duplicate. 8 clients x 40 requests, a new connection
    # each (requests over the inline size go to the pool): every answer is
    # 200, the daemon stays up, and none counts as a hang-up.
    import threading
    body = json.dumps({"q": [[0.5] * 16] * 4, "k": [[0.25] * 16] * 64,
                       "v": [[1.0] * 16] * 64}).encode()
    assert len(body) > 2048                     # not answered inline
    with Attnd() as a:
        statuses, errors = [], []

        def client():
            for _ in range(40):
                try:
                    s = connect(a)
                    s.sendall(post_head(extra=b"Content-Length: %d\r\n\r\n" % len(body)) + body)
                    statuses.append(read_response(s)[0])
                    s.close()
                except OSError as e:
                    errors.append(repr(e))

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[:3]
        assert statuses == [200] * 320
        text = a.get("/metrics").body.decode()
        assert "\nattnd_cancelled_total 0\n" in text
        still_serving(a)


def _sanitized(pid):
    with open("/proc/%d/maps" % pid) as f:
        maps = f.read()
    return "libasan" in maps or "libtsan" in maps


def _minor_faults(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def test_large_bodies_come_back_before_the_answer():
    # A large request's body buffer goes back to the kept blocks
    # (api/spare.c) before its answer is sent, so the client's next large
    # request reuses it instead of faulting in a new one. Base64 JSON
    # (4.2 MB, a block glibc maps afresh each time) and OIP v2 binary
    # (3.1 MB) requests alternate on one connection; after a warm-up the
    # daemon's page faults stay near zero per request. (Released after the
    # answer, on the loop thread, the bench's rounds saw ~75 a request at
    # load 4-6; an idle machine lets the loop win the race, so this passes
    # there either way.)
    import base64
    import struct
    rows, d = 2048, 128
    raw = [struct.pack("<%df" % (rows * d), *([(i % 7) / 8.0 - 0.4] * (rows * d)))
           for i in range(3)]
    b64 = json.dumps({x: {"shape": [rows, d], "dtype": "float32",
                          "data": base64.b64encode(r).decode()} for x, r in zip("qkv", raw)}
                     | {"dtype": "float32", "return": ["output"]}).encode()
    hdr = json.dumps({"inputs": [{"name": x, "shape": [rows, d], "datatype": "FP32",
                                  "parameters": {"binary_data_size": len(r)}}
                                 for x, r in zip("qkv", raw)],
                      "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}).encode()
    v2 = hdr + b"".join(raw)
    with Attnd() as a:
        c = attnd_proc.http_connection(a.port, timeout=60)

        def pair():
            c.request("POST", "/v1/attention", body=b64,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            assert r.status == 200 and r.read()
            c.request("POST", "/v2/models/attention/infer", body=v2,
                      headers={"Content-Type": "application/octet-stream",
                               "Inference-Header-Content-Length": str(len(hdr))})
            r = c.getresponse()
            assert r.status == 200 and r.read()

        for _ in range(3):
            pair()
        f0 = _minor_faults(a.proc.pid)
        for _ in range(8):
            pair()
        per = (_minor_faults(a.proc.pid) - f0) / 16
        c.close()
        if not _sanitized(a.proc.pid):          # their allocators fault pages of their own
            assert per < 30, "%.0f page faults per large request" % per

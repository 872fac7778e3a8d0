"""Request ids (review net 6): attnd takes a client's or proxy's
X-Request-Id (docker/nginx.conf passes a client's on) when it is 1 to 64
printable ASCII characters without spaces, else makes one; every answer
carries it, and the request's log line holds it with the error code of a
failed request, so a 504 deadline_exceeded is told from a 503 draining."""
import re
import time

from attnd_proc import Attnd, connect, events, read_to_close

ATT = {"q": [[1, 0]], "k": [[1, 0], [0, 1]], "v": [[1, 2], [3, 4]]}


def request_lines(a, n, timeout=10):
    deadline = time.time() + timeout
    while True:
        got = [e for e in events(a) if e.get("msg") == "request"]
        if len(got) >= n or time.time() > deadline:
            return got
        time.sleep(0.05)


def lines_with_ids(a, ids, timeout=10):
    """The request lines of ids, by id, once all are written (lines are
    written in batches, and the start-up's health probes have lines too,
    so a count of lines does not say these are there)."""
    deadline = time.time() + timeout
    while True:
        got = {e.get("id"): e for e in events(a) if e.get("msg") == "request"}
        if ids <= set(got) or time.time() > deadline:
            return got
        time.sleep(0.05)


def test_an_incoming_id_is_echoed_and_logged():
    with Attnd() as a:
        r = a.get("/v1/info", headers={"X-Request-Id": "trace-42"})
        assert r.status == 200 and r.headers.get("x-request-id") == "trace-42"
        r = a.post("/v1/attention", {"q": 1}, headers={"X-Request-Id": "bad-1"})
        assert r.status == 422 and r.headers.get("x-request-id") == "bad-1"
        lines = lines_with_ids(a, {"trace-42", "bad-1"})
        assert lines["trace-42"]["route"] == "/v1/info" and "code" not in lines["trace-42"]
        assert lines["bad-1"]["status"] == 422 and lines["bad-1"]["code"] == "invalid_field"


def test_every_answer_has_an_id_and_unusable_ones_are_replaced():
    long_id = "x" * 65
    with Attnd() as a:
        seen = []
        for path, hdr in (("/healthz", None), ("/", None), ("/metrics", None),
                          ("/v1/nope", None), ("/v1/info", {"X-Request-Id": "has space"}),
                          ("/v1/info", {"X-Request-Id": long_id}),
                          ("/v1/info", {"X-Request-Id": "caf\u00e9".encode().decode("latin-1")})):
            r = a.get(path, headers=hdr or {})
            rid = r.headers.get("x-request-id")
            assert rid and re.fullmatch(r"[0-9a-f]{16}", rid), (path, hdr, rid)
            seen.append(rid)
        assert len(set(seen)) == len(seen), seen
        r = a.get("/v1/info", headers={"X-Request-Id": "y" * 64})     # the longest taken
        assert r.headers.get("x-request-id") == "y" * 64
        logged = {e["id"] for e in request_lines(a, len(seen) + 1)}
        assert set(seen) <= logged


def test_transport_refusals_carry_the_id_and_their_code():
    with Attnd("--rate-limit", "0.01", "--rate-burst", "1", "--max-body-bytes", "100") as a:
        assert a.get("/v1/info", headers={"X-Request-Id": "first"}).status == 200
        r = a.get("/v1/info", headers={"X-Request-Id": "second"})
        assert r.status == 429 and r.headers.get("x-request-id") == "second"
        lines = lines_with_ids(a, {"first", "second"})
        assert lines["second"]["code"] == "rate_limited"
        assert lines["second"]["route"] == "/v1/info"


def test_a_long_method_leaves_the_route_code_and_id_in_the_line():
    """libmicrohttpd takes a method token of any length; a few kilobytes of
    it filled the log line, whose route, code and id came out empty. The
    method is logged cut to 64 bytes (at a whole character)."""
    for fmt in ("json", "text"):
        with Attnd("--log-format", fmt) as a:
            for i, method in enumerate((b"M" * 3000, "\u00e9".encode() * 1000)):
                s = connect(a.port)
                s.sendall(method + b" /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: long-%d\r\n"
                          b"Connection: close\r\n\r\n" % i)
                assert read_to_close(s).startswith(b"HTTP/1.1 405"), fmt
                s.close()
            deadline = time.time() + 10
            while "long-1" not in a.logs() and time.time() < deadline:
                time.sleep(0.05)
            if fmt == "json":
                lines = lines_with_ids(a, {"long-0", "long-1"})
                assert lines["long-0"]["method"] == "M" * 64, lines["long-0"]
                assert lines["long-1"]["method"] == "\u00e9" * 32, lines["long-1"]
                for e in (lines["long-0"], lines["long-1"]):
                    assert e["route"] == "/healthz" and e["code"] == "method_not_allowed", e
            else:
                line = [l for l in a.logs().splitlines() if "id=long-0" in l]
                assert line and " " + "M" * 64 + " /healthz 405 " in line[0], a.logs()[-600:]
                assert "code=method_not_allowed" in line[0], line


def test_text_log_format_holds_code_and_id():
    with Attnd("--log-format", "text") as a:
        a.post("/v1/attention", {"q": 1}, headers={"X-Request-Id": "txt-1"})
        deadline = time.time() + 10
        while "id=txt-1" not in a.logs() and time.time() < deadline:
            time.sleep(0.05)
        line = [l for l in a.logs().splitlines() if "id=txt-1" in l]
        assert line and "code=invalid_field" in line[0], a.logs()[-1000:]


def test_cors_lets_a_page_send_and_read_the_id():
    with Attnd("--cors-origins", "https://app.example") as a:
        r = a.request("OPTIONS", "/v1/attention",
                      headers={"Origin": "https://app.example",
                               "Access-Control-Request-Method": "POST",
                               "Access-Control-Request-Headers": "x-request-id, traceparent"})
        allowed = r.headers.get("access-control-allow-headers", "").lower()
        assert "x-request-id" in allowed and "traceparent" in allowed
        r = a.get("/v1/attention", headers={"Origin": "https://app.example"})
        assert r.status == 405
        exposed = r.headers.get("access-control-expose-headers", "")
        assert "Allow" in [h.strip() for h in exposed.split(",")] and "X-Request-Id" in exposed

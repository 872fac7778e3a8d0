"""tests/e2e/test_e2e_metrics.py — /metrics read by a real exposition parser.

The text is parsed with prometheus_client's text_string_to_metric_families
(Debian's python3-prometheus-client), which refuses malformed exposition
text. The checks follow the Prometheus naming conventions: one attnd_ prefix,
base units in the name (_seconds, _bytes), counters ending in _total,
histograms with cumulative buckets ending at +Inf; request counts labelled by
route template (never a raw session id) and status code; and the numbers move
as the requests made here say they must (a HEAD sends no body bytes).
"""
import math
import re
import time

import pytest

parser = pytest.importorskip(
    "prometheus_client.parser", reason="python3-prometheus-client (Makefile DEPS_TEST)")

ATT = {"q": [[1, 0]], "k": [[1, 0], [0, 1]], "v": [[1, 2], [3, 4]]}


def scrape(attnd):
    r = attnd.get("/metrics")
    assert r.status == 200, r
    ctype = r.headers["content-type"]
    assert ctype.startswith("text/plain") and "version=0.0.4" in ctype, ctype
    text = r.body.decode()
    fams = {f.name: f for f in parser.text_string_to_metric_families(text)}
    return text, fams


def value(fams, name, sample=None, **labels):
    fam = fams[name]
    sample = sample or name
    total = 0.0
    for s in fam.samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            total += s.value
    return total


def test_exposition_parses_and_names_follow_conventions(attnd):
    attnd.post("/v1/attention", ATT)
    text, fams = scrape(attnd)
    assert fams, "no metric families"
    for name, fam in fams.items():
        assert re.fullmatch(r"attnd_[a-z0-9_]+", name), name
        assert fam.documentation.strip(), f"{name} has no HELP"
        assert not re.search(r"_(ms|milliseconds|us|microseconds|kb|mb|kilobytes|megabytes)(_|$)", name), name
        if fam.type == "counter":
            # the parser strips _total from the family; the samples carry it
            assert all(s.name.endswith(("_total", "_created")) for s in fam.samples), name
            assert re.search(rf"^# TYPE {name}_total counter$|^# TYPE {name} counter$", text, re.M)
        elif fam.type == "gauge":
            assert not name.endswith("_total"), name
        for s in fam.samples:
            assert not math.isnan(s.value), s
            assert "le" not in s.labels or fam.type == "histogram", s


def settled_scrape(attnd, done=lambda fams: True):
    """A scrape taken once done(fams) holds and the request counts stop moving
    (2 s at most): a request is counted when its response has been sent, and
    the scrape, answered on a transport thread, can come first."""
    deadline = time.monotonic() + 2
    _, fams = scrape(attnd)
    while time.monotonic() < deadline:
        time.sleep(0.05)
        _, again = scrape(attnd)
        counts = [value(f, "attnd_requests", "attnd_requests_total", route="/v1/attention")
                  for f in (fams, again)]
        fams = again
        if counts[0] == counts[1] and done(fams):
            break
    return fams


def test_request_counter_by_route_and_code(attnd):
    before = settled_scrape(attnd)
    assert before["attnd_requests"].type == "counter"
    b200 = value(before, "attnd_requests", "attnd_requests_total", route="/v1/attention", code="200")
    b422 = value(before, "attnd_requests", "attnd_requests_total", route="/v1/attention", code="422")
    for _ in range(3):
        assert attnd.post("/v1/attention", ATT).status == 200
    assert attnd.post("/v1/attention", {"q": [[1, 0]], "k": [[1, 0]], "v": [[1, 2], [3, 4]]}).status == 422
    after = settled_scrape(attnd, lambda f: value(f, "attnd_requests", "attnd_requests_total",
                                                  route="/v1/attention") >= b200 + b422 + 4)
    assert value(after, "attnd_requests", "attnd_requests_total", route="/v1/attention", code="200") == b200 + 3
    assert value(after, "attnd_requests", "attnd_requests_total", route="/v1/attention", code="422") == b422 + 1
    for s in after["attnd_requests"].samples:
        if s.name == "attnd_requests_total":
            assert {"route", "code"} <= set(s.labels), s
            assert re.fullmatch(r"[1-5]\d\d", s.labels["code"]), s


def test_duration_histogram_in_seconds(attnd):
    attnd.post("/v1/attention", ATT)
    fams = settled_scrape(attnd, lambda f: value(
        f, "attnd_request_duration_seconds", "attnd_request_duration_seconds_count",
        route="/v1/attention") >= 1)
    fam = fams["attnd_request_duration_seconds"]
    assert fam.type == "histogram"
    series = {}
    for s in fam.samples:
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
        series.setdefault(key, {"buckets": [], "count": None, "sum": None})
        if s.name.endswith("_bucket"):
            series[key]["buckets"].append((float(s.labels["le"]), s.value))
        elif s.name.endswith("_count"):
            series[key]["count"] = s.value
        elif s.name.endswith("_sum"):
            series[key]["sum"] = s.value
    assert series
    for key, h in series.items():
        b = sorted(h["buckets"])
        assert b and b[-1][0] == math.inf, key
        counts = [c for _, c in b]
        assert counts == sorted(counts), f"buckets not cumulative: {key}"
        assert b[-1][1] == h["count"], key
        assert h["sum"] is not None and h["sum"] >= 0
        # seconds, not milliseconds: the bounds are fractions of a second
        finite = [le for le, _ in b if le != math.inf]
        assert finite and min(finite) < 0.01 and max(finite) <= 120, finite
    att = [h for k, h in series.items() if ("route", "/v1/attention") in k]
    assert att and att[0]["count"] >= 1
    assert att[0]["sum"] < 60 * att[0]["count"], "durations must be in seconds"


def test_session_gauges_and_route_templates(attnd):
    _, before = scrape(attnd)
    s0 = value(before, "attnd_sessions")
    assert before["attnd_sessions"].type == "gauge"
    assert before["attnd_kv_cache_bytes"].type == "gauge"
    ids = []
    for _ in range(2):
        r = attnd.post("/v1/sessions", {"d_k": 2, "d_v": 2})
        assert r.status == 201, r
        ids.append(r.json()["id"])
    r = attnd.post(f"/v1/sessions/{ids[0]}/kv", {"k": [[1, 0], [0, 1]], "v": [[1, 2], [3, 4]]})
    assert r.status == 200, r
    route = r'route="/v1/sessions/\{id\}/kv"'
    deadline = time.monotonic() + 2     # the append is counted once its answer is sent
    text, mid = scrape(attnd)
    while not re.search(route, text) and time.monotonic() < deadline:
        time.sleep(0.05)
        text, mid = scrape(attnd)
    assert value(mid, "attnd_sessions") == s0 + 2
    assert value(mid, "attnd_kv_cache_bytes") >= 2 * 2 * 2 * 4   # 2 rows of k and v, float32 at least
    for sid in ids:
        assert sid not in text, "raw session ids must not become label values"
    assert re.search(route, text)
    assert attnd.request("DELETE", f"/v1/sessions/{ids[0]}").status == 204
    _, after = scrape(attnd)
    assert value(after, "attnd_sessions") == s0 + 1
    assert value(after, "attnd_kv_cache_bytes") < value(mid, "attnd_kv_cache_bytes")
    attnd.request("DELETE", f"/v1/sessions/{ids[1]}")


# ---- refusals and hang-ups keep their route ---------------------------------

def _request_lines(a, status):
    from attnd_proc import events
    return [e for e in events(a) if e.get("status") == status]


def _wait(cond, timeout=10):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def test_rate_limited_requests_are_counted_under_their_route():
    from attnd_proc import Attnd
    with Attnd("--rate-limit", "0.01", "--rate-burst", "1") as a:
        assert a.get("/v1/info").status == 200
        assert a.get("/v1/info").status == 429
        assert a.post("/v1/attention", ATT).status == 429
        # the 429 to the POST is sent once its body is read and dropped, and
        # counted after that: the scrape waits for both counts
        fams = settled_scrape(a, lambda f: all(
            value(f, "attnd_requests", "attnd_requests_total", route=r, code="429") >= 1
            for r in ("/v1/info", "/v1/attention")))
        assert value(fams, "attnd_requests", "attnd_requests_total",
                     route="/v1/info", code="429") == 1
        assert value(fams, "attnd_requests", "attnd_requests_total",
                     route="/v1/attention", code="429") == 1
        assert value(fams, "attnd_requests", "attnd_requests_total", route="transport") == 0
        _wait(lambda: len(_request_lines(a, 429)) == 2)
        assert sorted(e["route"] for e in _request_lines(a, 429)) == ["/v1/attention",
                                                                     "/v1/info"]


def test_refusals_of_the_static_files_are_counted_under_their_route():
    """The transport's own refusals of a static file's path (429, 413, a
    client gone) are counted and logged under the file's template, as the
    api's 405 on the same path is, not as "unmatched"."""
    from attnd_proc import Attnd, connect
    with Attnd("--rate-limit", "0.01", "--rate-burst", "1", "--max-body-bytes", "1k") as a:
        assert a.request("POST", "/", b"{}").status == 405
        assert a.request("POST", "/app.js", b"{}").status == 429
        assert a.request("DELETE", "/v1/openapi.json").status == 429
        assert a.request("POST", "/", b"x" * 5000).status == 413
        s = connect(a.port)
        s.sendall(b"POST /app.js HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\nab")
        time.sleep(0.3)
        s.close()                                   # gone midway through the body
        want = {("/", "405"): 1, ("/{asset}", "429"): 1, ("/v1/openapi.json", "429"): 1,
                ("/", "413"): 1, ("/{asset}", "499"): 1}
        fams = settled_scrape(a, lambda f: all(
            value(f, "attnd_requests", "attnd_requests_total", route=r, code=c) == n
            for (r, c), n in want.items()))
        assert value(fams, "attnd_requests", "attnd_requests_total", route="unmatched") == 0
        _wait(lambda: len(_request_lines(a, 429)) == 2)
        assert sorted(e["route"] for e in _request_lines(a, 429)) == ["/v1/openapi.json",
                                                                     "/{asset}"]


def test_a_client_gone_before_the_answer_is_counted_under_its_route():
    from attnd_proc import Attnd, connect
    with Attnd() as a:
        s = connect(a.port)
        s.sendall(b"POST /v1/sessions/r1.abc/kv HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 4000\r\n\r\n{\"k\":[[1,")
        time.sleep(0.3)
        s.close()                                   # gone midway through the body

        def counted():
            _, fams = scrape(a)
            return value(fams, "attnd_requests", "attnd_requests_total",
                         route="/v1/sessions/{id}/kv", code="499") == 1
        _wait(counted)
        _, fams = scrape(a)
        assert value(fams, "attnd_requests", "attnd_requests_total", route="other") == 0
        _wait(lambda: len(_request_lines(a, 499)) == 1)
        assert _request_lines(a, 499)[0]["route"] == "/v1/sessions/{id}/kv"


def test_head_answers_count_no_body_bytes():
    # HEAD is answered with GET's headers and no body: the body bytes sent
    # (attnd_response_bytes_total, the log's bytes_out) count none of it.
    # The total is at most the bodies this client received (and the start's
    # /healthz probes, 15 bytes each); the HEADs' Content-Lengths add 800 KB,
    # most of them the OpenAPI document's, the largest static file.
    from attnd_proc import Attnd
    with Attnd() as a:
        received = 0
        r = a.post("/v1/sessions", {"d_k": 2, "d_v": 2})
        sid = r.json()["id"]
        received += len(r.body)
        r = a.post(f"/v1/sessions/{sid}/kv", {"k": [[1, 0]] * 300, "v": [[0, 1]] * 300})
        assert r.status == 200
        received += len(r.body)
        sizes = {}
        for path in ("/openapi.json", f"/v1/sessions/{sid}/export", f"/v1/sessions/{sid}/kv"):
            for _ in range(3):
                r = a.request("HEAD", path)
                assert r.status == 200 and r.body == b"", (path, r)
                sizes[path] = int(r.headers["content-length"])
        assert 3 * sum(sizes.values()) > 100000, sizes

        def heads_counted():
            nonlocal received
            text, f = scrape(a)
            received += len(text.encode())
            return sum(value(f, "attnd_requests", "attnd_requests_total", route=t, code="200")
                       for t in ("/{asset}", "/v1/sessions/{id}/export",
                                 "/v1/sessions/{id}/kv")) >= 9 + 1     # and the append
        _wait(heads_counted)
        _, fams = scrape(a)
        sent = value(fams, "attnd_response_bytes", "attnd_response_bytes_total")
        assert sent <= received + 3000, (sent, received, sizes)
        a.stop()
        heads = [e for e in _request_lines(a, 200) if e.get("method") == "HEAD"]
    assert len(heads) == 9 and all(e["bytes_out"] == 0 for e in heads), heads

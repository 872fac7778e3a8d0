"""tests/e2e/test_e2e_drain_concurrency.py — requests still computing when
--drain-timeout runs out: each is answered 503 draining (JSON, the
service's error shape) instead of losing its connection, and attnd exits
1 soon after. Nothing of a cut request is applied: a session attention
whose k/v append was cut finds the session as it was after a restart from
--state-dir (the append's journal record is refused once the 503 is
decided, core/store.h's sess_commit), and the final snapshot does not wait
for the computation to end. A session append with its record written
already (its pass done, its answer being written) cannot be withdrawn:
it answers for itself and its append lands, and attnd exits 1.

Each request cut below computes for seconds on 2 cores (HEADS x ROWS x
ROWS scores); --drain-timeout is 1 s (50 ms for a sequence_start and for
the appends left to answer)."""
import array
import base64
import http.client
import json
import random
import re
import signal
import shutil
import socket
import tempfile
import threading
import time

from attnd_proc import Attnd, http_connection, read_to_close, suite_wrap

D = 8               # d_k = d_v: small, so the body stays small for its work
ROWS = 65536        # keys in the session; queries per request
HEADS = 2


def _b64(shape, seed):
    n = 1
    for s in shape:
        n *= s
    rng = random.Random(seed)
    a = array.array("f", [0.0]) * n
    for i in range(0, n, 101):
        a[i] = rng.uniform(-1, 1)
    return {"shape": list(shape), "dtype": "float32",
            "data": base64.b64encode(a.tobytes()).decode()}


def _post(port, path, doc, timeout=120):
    """(status, headers, body) of one POST on its own connection; a dropped
    connection raises (http.client.RemoteDisconnected, ...)."""
    c = http_connection(port, timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(doc).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def _gauges(port, *names):
    """The values of names, from one scrape of /metrics (0 when absent)."""
    c = http_connection(port, timeout=10)
    try:
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
    finally:
        c.close()
    got = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in got:
            got[name] = float(value)
    return [got[n] for n in names]


def _gauge(port, name):
    return _gauges(port, name)[0]


def _session(a):
    """A float32 session of ROWS keys (HEADS query heads, one kv head)."""
    st, _, body = _post(a.port, "/v1/sessions", {"d_k": D, "d_v": D, "heads": HEADS,
                                                 "kv_heads": 1, "dtype": "float32",
                                                 "max_tokens": 2 * ROWS})
    assert st == 201, body
    sid = json.loads(body)["id"]
    chunk = 16384
    for i in range(ROWS // chunk):
        st, _, body = _post(a.port, f"/v1/sessions/{sid}/kv",
                            {"k": _b64((chunk, D), i), "v": _b64((chunk, D), 100 + i)})
        assert st == 200, body
    return sid


def _run_until_cut(a, jobs):
    """Send each of jobs {name: (path, doc)} on its own connection, SIGTERM
    once all are on the pool; returns ({name: (status, headers, body)},
    exit code, seconds from the signal to the exit, logs). A dropped
    connection is a status "dropped: <exception>"."""
    got = {}

    def send(name):
        path, doc = jobs[name]
        try:
            got[name] = _post(a.port, path, doc)
        except (OSError, http.client.HTTPException) as e:
            got[name] = ("dropped: " + type(e).__name__, {}, b"")

    threads = [threading.Thread(target=send, args=(n,)) for n in jobs]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while _gauge(a.port, "attnd_requests_on_pool") < len(jobs):
        assert time.monotonic() < deadline, "the requests never reached the pool"
        assert not got, got
        time.sleep(0.05)
    t_sig = time.monotonic()
    a.signal(signal.SIGTERM)
    for t in threads:
        t.join(60)
    rc = a.wait(timeout=60)
    return got, rc, time.monotonic() - t_sig, a.logs()


def _assert_cut(got, logs):
    for name, (status, headers, body) in got.items():
        assert status == 503, (name, status, body[:300], logs[-3000:])
        err = json.loads(body)["error"]
        assert err["code"] == "draining", (name, err)
        assert "nothing of it was applied" in err["message"], err
        assert headers["content-type"].startswith("application/json")
        assert headers.get("connection", "").lower() == "close"
    assert "drain timeout" in logs and "answered 503" in logs, logs[-3000:]


def _stateless(seed):
    return ("/v1/attention",
            {"q": _b64((HEADS, ROWS, D), seed), "k": _b64((HEADS, ROWS, D), seed + 1),
             "v": _b64((HEADS, ROWS, D), seed + 2), "dtype": "float32",
             "return": ["output"], "encoding": "base64"})


FLAGS = ("--drain-timeout", "1", "--workers", "2", "--max-elements", "64m",
         "--max-body-bytes", "64m", "--request-timeout", "600", "--max-tokens", str(2 * ROWS))


def test_stateless_requests_computing_at_the_drain_timeout_get_503():
    """(Before: their connections closed without an answer.)"""
    with Attnd(*FLAGS) as a:
        got, rc, took, logs = _run_until_cut(a, {"one": _stateless(1), "two": _stateless(5)})
    _assert_cut(got, logs)
    assert rc == 1, logs[-3000:]
    assert took < 1 + 5, took             # the drain timeout, then the answers


def _length(a, sid):
    c = http_connection(a.port, timeout=10)
    try:
        c.request("GET", f"/v1/sessions/{sid}")
        r = c.getresponse()
        body = r.read()
    finally:
        c.close()
    assert r.status == 200, body
    return json.loads(body)["length"]


def test_a_cut_session_request_gets_503_and_its_append_does_not_land():
    """(Before: the final snapshot waited for the session's computation,
    which then answered 200 long after the drain timeout, its append
    journaled.)"""
    sd = tempfile.mkdtemp(prefix="attnd-drain-cut-")
    try:
        with Attnd("--state-dir", sd, *FLAGS) as a:
            sid = _session(a)
            assert _length(a, sid) == ROWS
            append = (f"/v1/sessions/{sid}/attention",
                      {"q": _b64((HEADS, ROWS, D), 7), "k": _b64((1, D), 8),
                       "v": _b64((1, D), 9), "return": ["output"], "encoding": "base64"})
            got, rc, took, logs = _run_until_cut(a, {"append": append,
                                                     "stateless": _stateless(1)})
        _assert_cut(got, logs)
        assert rc == 1, logs[-3000:]
        assert took < 1 + 5, took
        assert "sessions saved" in logs                  # the snapshot still written
        with Attnd("--state-dir", sd, "--max-tokens", str(2 * ROWS)) as b:
            assert _length(b, sid) == ROWS               # the append did not land
            assert b.stop() == 0
    finally:
        shutil.rmtree(sd, ignore_errors=True)


# ---- a v2 sequence_start at the cut: nothing of it applied ------------------

SEQ_LONG = 131072   # causal H x n x n over d 8: seconds past the cut


def _sequence_start(seq_id, rows):
    """A v2 sequence_start request (binary FP32 q, k, v of rows rows): its
    session is put in place (journaled) only once it is answered; without
    seq_id, the same computation stateless. (body, header length)"""
    blobs = [base64.b64decode(_b64((HEADS, rows, D), s)["data"]) for s in (11, 12, 13)]
    seq = {"sequence_id": seq_id, "sequence_start": True} if seq_id else {}
    header = {"parameters": dict(seq, causal=True),
              "inputs": [{"name": n, "shape": [HEADS, rows, D], "datatype": "FP32",
                          "parameters": {"binary_data_size": len(b)}}
                         for n, b in zip("qkv", blobs)],
              "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}
    js = json.dumps(header).encode()
    return js + b"".join(blobs), len(js)


def _infer(port, body, n, got):
    """POST one v2 binary request; appends (status, headers, body) to got,
    or ("dropped: ...", {}, b"")."""
    c = http_connection(port, timeout=120)
    try:
        c.request("POST", "/v2/models/attention/infer", body=body,
                  headers={"Content-Type": "application/octet-stream",
                           "Inference-Header-Content-Length": str(n)})
        r = c.getresponse()
        got.append((r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()))
    except (OSError, http.client.HTTPException) as e:
        got.append(("dropped: " + type(e).__name__, {}, b""))
    finally:
        c.close()


def _start_sequence_until_cut(sd, seq_id, sessions_before=0):
    """A daemon on sd (drain timeout 50 ms) gets a sequence_start of
    SEQ_LONG rows and SIGTERM once it is on the pool, computing: it writes
    no record before it is answered. Returns ((status, headers, body), exit
    code, seconds from the signal to the exit, logs)."""
    with Attnd("--state-dir", sd, "--drain-timeout", "0.05", "--workers", "2",
               "--max-elements", "64m", "--max-body-bytes", "64m",
               "--request-timeout", "600", "--max-tokens", str(2 * SEQ_LONG)) as a:
        assert _gauge(a.port, "attnd_sessions") == sessions_before
        records = _gauge(a.port, "attnd_journal_records_total")
        body, n = _sequence_start(seq_id, SEQ_LONG)
        got = []
        t = threading.Thread(target=_infer, args=(a.port, body, n, got))
        t.start()
        deadline = time.monotonic() + 60
        while _gauge(a.port, "attnd_requests_on_pool") < 1:
            assert time.monotonic() < deadline, "the start never reached the pool"
            assert not got, got[0][:2]
            time.sleep(0.01)
        time.sleep(0.2)                 # reading its body done: computing
        assert _gauge(a.port, "attnd_journal_records_total") == records
        t_sig = time.monotonic()
        a.signal(signal.SIGTERM)
        t.join(60)
        rc = a.wait(timeout=60)
        return got[0], rc, time.monotonic() - t_sig, a.logs()


def _assert_start_cut(status, raw, rc, took, logs):
    assert "1 answered 503 draining" in logs and "0 left to answer" in logs, logs[-3000:]
    assert status == 503, (status, raw[:300], logs[-3000:])
    err = json.loads(raw)["error"]
    assert "nothing of it was applied" in err and err.endswith("[draining]"), err
    assert rc == 1, logs[-3000:]
    assert took < 0.05 + 5, took


def test_a_sequence_start_cut_while_computing_leaves_no_sequence():
    """A start computing at the cut has journaled nothing: it is answered
    503 draining at once, as any request computing is, and no sequence
    outlives it. (Before: it had made its session before computing, was
    left to answer for itself and, past the grace, stopped with 503
    "shutting down".)"""
    sd = tempfile.mkdtemp(prefix="attnd-drain-start-")
    try:
        (status, headers, raw), rc, took, logs = _start_sequence_until_cut(sd, "left-1")
        _assert_start_cut(status, raw, rc, took, logs)
        assert "sessions saved to %s: 0" % sd in logs, logs[-3000:]
        with Attnd("--state-dir", sd) as b:
            assert _gauge(b.port, "attnd_sessions") == 0
            assert b.stop() == 0
    finally:
        shutil.rmtree(sd, ignore_errors=True)


def test_a_cut_sequence_start_keeps_the_earlier_sequence():
    """A start cut at the drain on an id in use leaves the earlier sequence
    as it was, in the snapshot and after a restart. (Before: the start had
    deleted it before computing, and the earlier sequence was gone.)"""
    sd = tempfile.mkdtemp(prefix="attnd-drain-keep-")
    try:
        with Attnd("--state-dir", sd) as a:
            got = []
            _infer(a.port, *_sequence_start("left-2", 4), got)
            assert got[0][0] == 200, got[0][2][:300]
            js = json.loads(got[0][2][:int(got[0][1]["inference-header-content-length"])])
            assert a.stop() == 0
        (status, headers, raw), rc, took, logs = _start_sequence_until_cut(
            sd, "left-2", sessions_before=1)
        _assert_start_cut(status, raw, rc, took, logs)
        assert "sessions saved to %s: 1" % sd in logs, logs[-3000:]
        with Attnd("--state-dir", sd) as b:
            assert _length(b, js["parameters"]["session_id"]) == 4
            assert b.stop() == 0
    finally:
        shutil.rmtree(sd, ignore_errors=True)


# ---- a request with a change journaled already: left to answer for itself ---

LEFT_KEYS = 4096    # the session's rows before the append
LEFT_QUERIES = 192  # scores and weights of 192 x 4097, 17 digits each: 20 MB
LEFT_FLAGS = ("--drain-timeout", "0.05", "--workers", "2", "--max-elements", "64m",
              "--max-body-bytes", "64m", "--request-timeout", "600")


def _left_session(a):
    """A session of LEFT_KEYS rows on a; returns (its id, the journal's
    records, the append: a session attention of LEFT_QUERIES queries and
    one row whose answer takes long to write)."""
    st, _, body = _post(a.port, "/v1/sessions", {"d_k": D, "d_v": D, "dtype": "float32",
                                                 "max_tokens": 2 * LEFT_KEYS})
    assert st == 201, body
    sid = json.loads(body)["id"]
    st, _, body = _post(a.port, f"/v1/sessions/{sid}/kv",
                        {"k": _b64((LEFT_KEYS, D), 1), "v": _b64((LEFT_KEYS, D), 2)})
    assert st == 200, body
    append = {"q": _b64((LEFT_QUERIES, D), 3), "k": _b64((1, D), 4), "v": _b64((1, D), 5),
              "return": ["scores", "weights"], "digits": 17}
    return sid, _gauge(a.port, "attnd_journal_records_total"), append


def _sigterm_once_journaled(a, records, got):
    """SIGTERM a as soon as its journal holds the append's record while
    the append is still on the pool (writing its answer); got: the
    client's answer, empty until it has one. Returns a's exit code."""
    deadline = time.monotonic() + 60
    while True:
        journaled, on_pool = _gauges(a.port, "attnd_journal_records_total",
                                     "attnd_requests_on_pool")
        if journaled > records:
            break
        assert time.monotonic() < deadline, "the append was never journaled"
        assert not got, got[0][:2]
        time.sleep(0.002)
    assert (journaled, on_pool) == (records + 1, 1), (journaled, on_pool)
    a.signal(signal.SIGTERM)
    return a.wait(timeout=60)


def _assert_left(rc, logs, sd, sid):
    """The append left to answer for itself, attnd exited 1 and a restart
    on sd finds its row in the session."""
    assert "0 answered 503 draining" in logs and "1 left to answer" in logs, logs[-3000:]
    assert rc == 1, logs[-3000:]
    assert "stopped (exit 1)" in logs, logs[-3000:]
    assert "sessions saved to %s: 1" % sd in logs, logs[-3000:]
    with Attnd("--state-dir", sd) as b:
        assert _length(b, sid) == LEFT_KEYS + 1          # the append landed
        assert b.stop() == 0


def test_a_session_append_journaled_at_the_cut_answers_for_itself():
    """A session attention that appends has written its APPEND record once
    its pass is done, and then writes its answer on the pool, computing
    still for the drain: 1.6 million numbers with "digits" 17 (printf's
    %.17g: 0.3 s here, 0.6-1.2 s under ASan and TLS, against a drain
    timeout of 50 ms and the 2 s its answer then gets). Cut then, its
    append cannot be withdrawn: it is not answered 503 (a restart would
    find the rows the 503 says were not applied) but left to answer for
    itself: 200, whole, attnd exits 1, and the session has the row after
    a restart."""
    sd = tempfile.mkdtemp(prefix="attnd-drain-left-")
    try:
        with Attnd("--state-dir", sd, *LEFT_FLAGS) as a:
            sid, records, append = _left_session(a)
            got = []

            def send():
                try:
                    got.append(_post(a.port, f"/v1/sessions/{sid}/attention", append))
                except (OSError, http.client.HTTPException) as e:
                    got.append(("dropped: " + type(e).__name__, {}, b""))

            t = threading.Thread(target=send)
            t.start()
            rc = _sigterm_once_journaled(a, records, got)
            t.join(60)
            logs = a.logs()
        status, _, raw = got[0]
        assert status == 200, (status, raw[:300], logs[-3000:])
        out = json.loads(raw)
        for name in ("scores", "weights"):
            assert len(out[name]) == LEFT_QUERIES, name
            assert all(len(row) == LEFT_KEYS + 1 for row in out[name]), name
        _assert_left(rc, logs, sd, sid)
    finally:
        shutil.rmtree(sd, ignore_errors=True)


def test_an_answer_left_to_answer_not_read_is_cut_and_its_append_kept():
    """The same append, its client reading nothing until attnd has gone:
    its answer does not leave in the 2 s it gets, nor in the 1 s more,
    and attnd exits 1 then, its connection closed mid-answer (a 200 cut
    short, not a 503: its pass was done), the append in the snapshot."""
    sd = tempfile.mkdtemp(prefix="attnd-drain-unread-")
    try:
        with Attnd("--state-dir", sd, *LEFT_FLAGS) as a:
            sid, records, append = _left_session(a)
            raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            raw.settimeout(30)
            raw.connect(("127.0.0.1", a.port))
            s = suite_wrap(raw)
            body = json.dumps(append).encode()
            s.sendall(f"POST /v1/sessions/{sid}/attention HTTP/1.1\r\nHost: attnd\r\n"
                      f"Content-Type: application/json\r\nContent-Length: {len(body)}"
                      "\r\n\r\n".encode() + body)
            t_sig = time.monotonic()
            rc = _sigterm_once_journaled(a, records, [])
            took = time.monotonic() - t_sig
            got = read_to_close(s)
            s.close()
            logs = a.logs()
        head, _, rest = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 "), got[:300]
        length = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))
        assert 0 < len(rest) < length, (len(rest), length)
        assert "answer(s) not sent in 2000 ms" in logs, logs[-3000:]
        assert "1 answer(s) not sent: cut" in logs, logs[-3000:]
        assert took < 0.05 + 2 + 1 + 5, took
        _assert_left(rc, logs, sd, sid)
    finally:
        shutil.rmtree(sd, ignore_errors=True)

"""Deadlines (--request-timeout, timeout_ms) and cancellation by hang-up.

A computation past its deadline stops at its next piece and answers 504
deadline_exceeded (OIP v2 in its own error shape); a client that hangs up
while its request computes frees the worker within one piece. These are
tests of behaviour, not of speed: the long request is timed alone first,
and the checks are that the stop was counted and that the next request was
served before the long one would have finished.
"""
import base64
import json
import random
import re
import socket
import ssl
import struct
import time

import pytest

from attnd_proc import Attnd, connect, read_to_close, suite_wrap

N = 8192        # n = L, d = 64: ~0.2-0.9 s of compute on one worker


def tensor(rows, d, seed):
    rnd = random.Random(seed)
    raw = struct.pack("<%df" % (rows * d), *(rnd.uniform(-1, 1) for _ in range(rows * d)))
    return {"shape": [rows, d], "dtype": "float32", "data": base64.b64encode(raw).decode()}


@pytest.fixture(scope="module")
def big():
    return {"q": tensor(N, 64, 1), "k": tensor(N, 64, 2), "v": tensor(N, 64, 3),
            "dtype": "float32", "encoding": "base64", "return": ["output"]}


SMALL = {"q": [[0.5, 1]] * 4, "k": [[1, 0]] * 8, "v": [[1, 2]] * 8, "return": ["output"]}


def counter(a, name):
    text = a.get("/metrics").body.decode()
    return int(re.search(r"^%s (\d+)$" % name, text, re.M).group(1))


def timed_post(a, body):
    t0 = time.monotonic()
    r = a.post("/v1/attention", body, timeout=60)
    return r, time.monotonic() - t0


def test_timeout_ms_stops_a_long_request(big):
    with Attnd("--workers", "1") as a:
        full, t_full = timed_post(a, big)
        assert full.status == 200, full
        r, _ = timed_post(a, dict(big, timeout_ms=1))
        assert r.status == 504, r
        assert r.json()["error"]["code"] == "deadline_exceeded"
        assert counter(a, "attnd_deadline_exceeded_total") == 1
        # the worker is free and whole: the same request with room completes
        again, _ = timed_post(a, dict(big, timeout_ms=600000))
        assert again.status == 200 and again.json()["output"] == full.json()["output"]


def test_request_timeout_flag(big):
    with Attnd("--workers", "1", "--request-timeout", "0.001") as a:
        r, _ = timed_post(a, big)
        assert r.status == 504 and r.json()["error"]["code"] == "deadline_exceeded", r
        assert a.post("/v1/attention", SMALL).status == 200   # small passes finish at once
        assert counter(a, "attnd_deadline_exceeded_total") == 1


def test_v2_deadline_in_its_own_shape(big):
    def v2_input(name, t):
        raw = base64.b64decode(t["data"])
        return {"name": name, "shape": t["shape"], "datatype": "FP32",
                "data": list(struct.unpack("<%df" % (len(raw) // 4), raw))}
    n = 2048
    body = {"inputs": [v2_input(x, tensor(n, 64, i)) for i, x in enumerate("qkv")],
            "outputs": [{"name": "output"}], "parameters": {"timeout_ms": 1}}
    with Attnd("--workers", "1") as a:
        r = a.post("/v2/models/attention/infer", body, timeout=60)
        assert r.status == 504, r
        assert r.json()["error"].endswith("[deadline_exceeded]"), r
        r = a.post("/v2/models/attention/infer", dict(body, parameters={"timeout_ms": 0}))
        assert r.status == 400 or r.status == 422, r
        # Triton's own spelling: "timeout" in microseconds (0: none), and
        # "priority", taken and unused
        r = a.post("/v2/models/attention/infer",
                   dict(body, parameters={"timeout": 1000, "priority": 2}), timeout=60)
        assert r.status == 504 and "deadline" in r.json()["error"], r
        small = {"inputs": [v2_input(x, tensor(4, 4, i)) for i, x in enumerate("qkv")],
                 "outputs": [{"name": "output"}]}
        for ok in ({"timeout": 0}, {"timeout": 60000000, "priority": 0}):
            assert a.post("/v2/models/attention/infer", dict(small, parameters=ok)).status == 200
        for bad, where in (({"timeout": -1}, "timeout"), ({"timeout": 1.5}, "timeout"),
                           ({"priority": "high"}, "priority"), ({"priority": -1}, "priority")):
            r = a.post("/v2/models/attention/infer", dict(small, parameters=bad))
            assert r.status == 400 and "/parameters/" + where in r.json()["error"], (bad, r)


def test_request_timeout_stops_a_verify_of_small_passes():
    # n = L = 128: each of verify's passes is one piece, too small to be
    # split (the splits check the deadline), and its reference loops are
    # its own; ~0.2 s of them in all ran to 200 past a 1 ms deadline.
    rnd = random.Random(5)
    m = [[[rnd.uniform(-1, 1) for _ in range(16)] for _ in range(128)] for _ in "qkv"]
    body = {"q": m[0], "k": m[1], "v": m[2]}
    with Attnd("--workers", "1", "--request-timeout", "0.001") as a:
        r = a.post("/v1/verify", body, timeout=60)
        assert r.status == 504 and r.json()["error"]["code"] == "deadline_exceeded", r
        assert counter(a, "attnd_deadline_exceeded_total") == 1


@pytest.mark.parametrize("bad", [0, -5, 1.5, "10", True, 86400001])
def test_bad_timeout_ms(bad):
    with Attnd() as a:
        r = a.post("/v1/attention", dict(SMALL, timeout_ms=bad))
        assert r.status == 422, r
        assert r.json()["error"] == {"code": "invalid_field", "path": "/timeout_ms",
                                     "message": r.json()["error"]["message"]}


def test_hang_up_cancels_and_frees_the_worker(big):
    body = json.dumps(big).encode()
    with Attnd("--workers", "1") as a:
        _, t_full = timed_post(a, big)              # the long request alone
        s = connect(a.port)
        s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        deadline = time.monotonic() + 30
        while counter(a, "attnd_requests_on_pool") < 1:     # /metrics is not on it
            assert time.monotonic() < deadline, "the long request never reached the pool"
            time.sleep(0.005)
        t_close = time.monotonic()
        s.close()
        # one worker, one client: this request waits for the long one's worker
        r = a.post("/v1/attention", SMALL, timeout=60)
        waited = time.monotonic() - t_close
        assert r.status == 200
        assert waited < t_full, (waited, t_full)    # sooner than the long one's end
        deadline = time.monotonic() + 10
        while counter(a, "attnd_cancelled_total") != 1:
            assert time.monotonic() < deadline, "the hang-up was not counted"
            time.sleep(0.02)
        assert counter(a, "attnd_deadline_exceeded_total") == 0


def _post_from(port, src, body, held=0):
    """A socket from address src (another client: each address has its own
    queues) that has sent POST /v1/attention with body, all but its last
    `held` bytes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60, source_address=(src, 0))
    s = suite_wrap(s)
    s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
              + body[:len(body) - held])
    return s


def test_hang_up_while_queued_frees_the_request_at_once():
    # --workers 1: a pool of 3 threads, one long request of each of three
    # clients on them (seconds each); a fourth client's request waits in
    # its queue. Its hang-up is answered there and then: counted, and its
    # slot of --max-inflight-per-key given back, not once a thread is free.
    row = struct.pack("<64f", *(random.Random(4).uniform(-1, 1) for _ in range(64)))
    t = {"shape": [4, N, 64], "dtype": "float32",
         "data": base64.b64encode(row * (4 * N)).decode()}
    heavy = json.dumps({"q": t, "k": t, "v": t, "dtype": "float32",
                        "return": ["output"]}).encode()
    queued = json.dumps(dict(SMALL, q=[[0.5, 1]] * 200)).encode()
    assert len(queued) > 2048            # not one answered on the transport thread
    with Attnd("--workers", "1", "--max-inflight-per-key", "1",
               "--max-elements", "100000000") as a:
        # each body's last byte is held back and the three sent together, so
        # none starts computing while another is still uploading (over TLS
        # the uploads take about as long as one computation)
        running = [_post_from(a.port, "127.0.0.%d" % i, heavy, held=1) for i in (2, 3, 4)]
        for r in running:
            r.sendall(heavy[-1:])
        deadline = time.monotonic() + 60
        while counter(a, "attnd_requests_on_pool") < 3:
            assert time.monotonic() < deadline, "the long requests never reached the pool"
            time.sleep(0.01)
        s = _post_from(a.port, "127.0.0.5", queued)
        while counter(a, "attnd_requests_on_pool") < 4:
            assert time.monotonic() < deadline, "the queued request never reached the pool"
            time.sleep(0.005)
        s.close()
        while counter(a, "attnd_cancelled_total") < 1:
            assert time.monotonic() < deadline, "the hang-up was not counted"
            time.sleep(0.005)
        # counted while the three still compute: none has answered
        for r in running:
            r.setblocking(False)
            with pytest.raises((BlockingIOError, ssl.SSLWantReadError)):   # no byte yet
                r.recv(1)
            r.setblocking(True)
        assert counter(a, "attnd_requests_on_pool") == 3
        # the client's in-flight slot is free: its next request is served
        r = _post_from(a.port, "127.0.0.5", json.dumps(SMALL).encode())
        assert read_to_close(r).startswith(b"HTTP/1.1 200 "), "the slot was still held"
        for r in running:
            r.close()

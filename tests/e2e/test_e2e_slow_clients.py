"""tests/e2e/test_e2e_slow_clients.py — slowloris does not starve /healthz,
and slow clients are closed at their read deadlines.

40 clients open connections and drip a request one byte every 200 ms, never
finishing it: 30 drip a header, 10 send their headers and drip the body. Meanwhile fresh clients probe /healthz: each probe must
be answered, and quickly — at most one of 20 probes may take longer than
100 ms, none longer than 1 s (generous: this is a behavioural check on a
shared 2-core machine, not a benchmark). Afterwards the slow connections are
dropped and the daemon's fds return to the baseline.

The idle timeout restarts with every byte, so a dripping client would hold
its connection for ever; --read-timeout and --min-body-rate close one whose
headers are not in by --conn-timeout + --read-timeout after the connection
opened (or after the last answer), or whose body comes slower than the rate
once --read-timeout has passed, and leave clients that are merely slow
or idle between requests alone.
"""
import os
import ssl
import sys
import threading
import time

from attnd_proc import Attnd, connect, events, http_connection

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import load_driver  # noqa: E402

SLOW = 40


HEADER_DRIP = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 10000
BODY_DRIP = (b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             b"Content-Type: application/json\r\nContent-Length: 10000\r\n\r\n" +
             b" " * 10000)


def _drip(port, stop, opened, data=HEADER_DRIP):
    try:
        s = connect(port, timeout=5)
    except OSError:
        return
    opened.append(s)
    i = 0
    if data is BODY_DRIP:           # the headers at once, then the body byte by byte
        i = data.index(b"\r\n\r\n") + 4
        try:
            s.sendall(data[:i])
        except OSError:
            return
    while not stop.is_set() and i < len(data):
        try:
            s.send(data[i:i + 1])
        except OSError:
            return          # the server hung up on a slow client: fine
        i += 1
        stop.wait(0.2)


def _probe(port):
    t0 = time.monotonic()
    c = http_connection(port, timeout=5)
    try:
        c.request("GET", "/healthz")
        r = c.getresponse()
        r.read()
        return r.status, time.monotonic() - t0
    finally:
        c.close()


def test_slow_header_clients_do_not_block_healthz():
    with Attnd() as d:
        pid = d.proc.pid
        fd_base = load_driver.fd_count(pid)
        stop = threading.Event()
        opened = []
        threads = [threading.Thread(target=_drip, daemon=True,
                                    args=(d.port, stop, opened,
                                          BODY_DRIP if i % 4 == 3 else HEADER_DRIP))
                   for i in range(SLOW)]
        for t in threads:
            t.start()
        time.sleep(1.0)             # every slow client connected and dripping
        assert len(opened) == SLOW, f"only {len(opened)} slow clients connected"

        times = []
        for _ in range(20):
            status, dt = _probe(d.port)
            assert status == 200
            times.append(dt)
            time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join(5)
        for s in opened:
            s.close()

        times.sort()
        print(f"healthz under {SLOW} slow clients: median {times[10] * 1000:.1f} ms, "
              f"max {times[-1] * 1000:.1f} ms")
        assert times[-2] < 0.100, f"/healthz latencies (s): {times}"
        assert times[-1] < 1.0, f"/healthz latencies (s): {times}"

        fds = load_driver.wait_fds(pid, fd_base, timeout=10)
        assert fds <= fd_base, f"fds {fds} after the slow clients left, baseline {fd_base}"
        assert d.get("/healthz").status == 200
        rc = d.stop()
        assert rc == 0, f"attnd exited {rc} on SIGTERM: {d.logs()[-3000:]}"


def _drip_until_closed(port, data, interval, t_end, result):
    """Drip data (after its headers when it has a body) until the server
    hangs up: the seconds that took, or None if it never did."""
    s = connect(port, timeout=5)
    t0 = time.monotonic()
    i = data.index(b"\r\n\r\n") + 4 if data is BODY_DRIP else 0
    try:
        s.sendall(data[:i])
        while time.monotonic() < t_end:
            s.send(data[i:i + 1])
            i += 1
            time.sleep(interval)
            s.setblocking(False)
            try:
                if s.recv(1 << 16) == b"":
                    raise ConnectionResetError("closed")
            except (BlockingIOError, ssl.SSLWantReadError):
                pass
            finally:
                s.setblocking(True)
        result.append(None)
    except OSError:
        result.append(time.monotonic() - t0)
    finally:
        s.close()


def _send_in_pieces(port, body, pieces, pause):
    """POST /v1/attention with its body in pieces, pause seconds apart: the status."""
    s = connect(port, timeout=10)
    try:
        s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: %d\r\n\r\n" % len(body))
        step = len(body) // pieces
        for k in range(pieces):
            time.sleep(pause)
            s.sendall(body[k * step:] if k == pieces - 1 else body[k * step:(k + 1) * step])
        head = s.recv(64)
        return int(head.split()[1])
    finally:
        s.close()


def test_slow_clients_are_closed_at_their_read_deadlines():
    with Attnd("--conn-timeout", "2", "--read-timeout", "1", "--min-body-rate", "200") as d:
        t_end = time.monotonic() + 12
        slow_head, slow_body = [], []
        threads = [threading.Thread(target=_drip_until_closed, daemon=True,
                                    args=(d.port, data, 0.25, t_end, out))
                   for data, out in ((HEADER_DRIP, slow_head), (BODY_DRIP, slow_body))]
        for t in threads:
            t.start()
        # slow but not too slow: 2000 bytes in 4 pieces a second apart (over 400 B/s)
        body = b'{"q":[[1,0]],"k":[[1,0]],"v":[[1]]}'.ljust(2000)
        assert _send_in_pieces(d.port, body, 4, 0.6) == 200
        # idle between requests for less than --conn-timeout: still served
        c = http_connection(d.port, timeout=10)
        for _ in range(2):
            c.request("GET", "/healthz")
            r = c.getresponse()
            assert r.status == 200
            r.read()
            time.sleep(1.5)
        c.close()
        for t in threads:
            t.join(15)
        # headers: 2 + 1 s after opening, body: 1 s after its headers; the
        # sweep runs once a second
        assert slow_head[0] is not None and 2.5 < slow_head[0] < 8, slow_head
        assert slow_body[0] is not None and 0.5 < slow_body[0] < 6, slow_body
        assert "slow connection" in d.logs()
        assert d.get("/healthz").status == 200
        # attnd closed the slow body, its client did not go: 408, not 499
        posts = [(e.get("status"), e.get("route")) for e in events(d)
                 if e.get("msg") == "request" and e.get("method") == "POST"]
        # (the piecewise sender closes after its status line: over TLS that
        # may be before the whole answer went, a 499 of its own)
        assert posts.count((408, "/v1/attention")) == 1, posts
        assert 'attnd_requests_total{route="/v1/attention",code="408"} 1' in \
            d.get("/metrics").body.decode(), posts

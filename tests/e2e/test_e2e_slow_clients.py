"""tests/e2e/test_e2e_slow_clients.py — slowloris does not starve /healthz.

40 clients open connections and drip a request one byte every 200 ms, never
finishing it: 30 drip a header, 10 send their headers and drip the body. Meanwhile fresh clients probe /healthz: each probe must
be answered, and quickly — at most one of 20 probes may take longer than
100 ms, none longer than 1 s (generous: this is a behavioural check on a
shared 2-core machine, not a benchmark). Afterwards the slow connections are
dropped and the daemon's fds return to the baseline.
"""
import os
import sys
import threading
import time

from attnd_proc import Attnd, connect, http_connection

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

#!/usr/bin/env python3
"""tests/bench/bench_move.py BUILD — moving a session over HTTP on loopback.

A 16,384-row session of 8 heads, d_k = d_v = 128, float32 (128 MiB of rows)
is exported (GET /v1/sessions/{id}/export) and imported (POST
/v1/sessions/import) by curl against BUILD/attnd, BENCH_REPS times,
interleaved with the same-run limit: libmicrohttpd's own echo of the same
bytes (BUILD/bench/mhd_server, POST /echo: the body in and back out, so its
GB/s is per direction). curl reads the body from /dev/shm (when there is
one) and writes answers to /dev/null. Medians of wall-clock GB/s of export bytes; the goal
is >= 1 GB/s each way. Prints BENCHROW lines (format: tests/bench/run.sh).
The daemon and the echo server are started here and stopped by PID.
env: BENCH_REPS (5)
"""
import base64
import json
import os
import random
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

ROWS, HEADS, D, CHUNK = 16384, 8, 128, 1024


def wait_port(path, proc):
    for _ in range(200):
        if proc.poll() is not None:
            raise SystemExit(f"bench_move: server exited with {proc.returncode}")
        if os.path.exists(path) and open(path).read().strip():
            return int(open(path).read())
        time.sleep(0.05)
    raise SystemExit("bench_move: server did not start")


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def call(url, method="GET", body=None, ctype="application/json"):
    req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": ctype})
    with urllib.request.urlopen(req, timeout=300) as r:
        return r.status, r.read()


def curl(args):
    """Seconds curl took for one transfer (time_total); exits on an HTTP error."""
    out = subprocess.run(["curl", "-s", "-w", "%{http_code} %{time_total}", *args],
                         capture_output=True, text=True, check=True).stdout.split()
    if out[-2][0] != "2":
        raise SystemExit(f"bench_move: curl {args[-1]} answered {out[-2]}")
    return float(out[-1])


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    reps = int(os.environ.get("BENCH_REPS", "5"))
    # the exported file is kept in memory (/dev/shm) when it can be: a disk
    # write of 128 MiB would be what is measured
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    tmp = tempfile.mkdtemp(prefix="attnd_bench_move.", dir=shm)
    procs = []
    try:
        port_file = os.path.join(tmp, "port")
        a = subprocess.Popen([f"{build}/attnd", "--host", "127.0.0.1", "--port", "0",
                              "--port-file", port_file, "--max-body-bytes", "1g",
                              "--max-cache-bytes", "4g", "--max-tokens", str(ROWS),
                              "--workers", "2", "--log-file", os.path.join(tmp, "log")])
        procs.append(a)
        url = f"http://127.0.0.1:{wait_port(port_file, a)}"
        mport = free_port()
        m = subprocess.Popen([f"{build}/bench/mhd_server", str(mport), "2", "epoll"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(m)
        echo = f"http://127.0.0.1:{mport}/echo"
        for _ in range(200):
            try:
                call(f"http://127.0.0.1:{mport}/")
                break
            except OSError:
                time.sleep(0.05)

        _, body = call(f"{url}/v1/sessions", "POST", json.dumps(
            {"d_k": D, "d_v": D, "heads": HEADS, "dtype": "float32"}).encode())
        sid = json.loads(body)["id"]
        rnd = random.Random(18)
        n = HEADS * CHUNK * D
        t = {"shape": [HEADS, CHUNK, D], "dtype": "float32",
             "data": base64.b64encode(struct.pack("<%df" % n, *(rnd.uniform(-1, 1)
                                                                  for _ in range(n)))).decode()}
        chunk = json.dumps({"k": t, "v": t}).encode()
        for _ in range(ROWS // CHUNK):
            call(f"{url}/v1/sessions/{sid}/kv", "POST", chunk)

        blob = os.path.join(tmp, "session.bin")
        curl(["-o", blob, f"{url}/v1/sessions/{sid}/export"])
        size = os.path.getsize(blob)
        exp, imp, ech = [], [], []
        for _ in range(reps):
            exp.append(curl(["-o", "/dev/null", f"{url}/v1/sessions/{sid}/export"]))
            imp.append(curl(["-o", os.path.join(tmp, "new.json"), "-H",
                             "Content-Type: application/octet-stream",
                             "--data-binary", f"@{blob}", f"{url}/v1/sessions/import"]))
            nid = json.load(open(os.path.join(tmp, "new.json")))["id"]
            call(f"{url}/v1/sessions/{nid}", "DELETE")
            ech.append(curl(["-o", "/dev/null", "-H", "Content-Type: application/octet-stream",
                             "--data-binary", f"@{blob}", echo]))
        gb = size / 1e9
        lim = gb / statistics.median(ech)
        print(f"  {size} bytes an export; MHD echo {lim:.2f} GB/s each way "
              f"(echo s {['%.3f' % x for x in ech]})")
        for what, ts in (("export", exp), ("import", imp)):
            gbs = gb / statistics.median(ts)
            print(f"  {what}: {gbs:.2f} GB/s (s {['%.3f' % x for x in ts]})")
            print("BENCHROW|session %s over HTTP (16384 rows, 8 heads, d=128, f32, curl)|"
                  "MHD echo GB/s (same bytes)|%.2f|-|-|%.2f|GB/s|%.2f of echo|>= 1 GB/s|%s"
                  % (what, lim, gbs, gbs / lim, "PASS" if gbs >= 1 else "MISS"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

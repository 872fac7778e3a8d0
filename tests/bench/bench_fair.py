#!/usr/bin/env python3
"""tests/bench/bench_fair.py BIN [one] — fairness of the compute pool under load.

Two API keys on one attnd (default --workers: the CPU count). The small
client sends n=L=64 d=64 JSON attention requests one after another; its
latency percentiles are taken alone, then again while a second process
keeps 24 large requests (n=L=8192 d=64, base64 float32, output only) in
flight with the other key. The row reports the small client's p99 under
load against its p99 alone in the same run (goal: at most 5x, issue 23),
and the large requests' throughput under load for context. With "one",
the large requests carry the small client's key: one client (as every
caller is behind a proxy) whose small requests must not wait behind its
own large ones; same goal. Each p99 is
taken over 1000 requests (the tenth slowest), so that one stall of a
shared machine does not set it. Loopback only; the daemon is stopped by
its PID; every loop is bounded in count and time.
"""
import base64
import http.client
import json
import multiprocessing
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

BIG_N, BIG_D, BIG_IN_FLIGHT = 8192, 64, 24
SMALL_N, SMALL_D = 64, 64
ALONE_REQS, LOADED_REQS, LOADED_MAX_S, WARM_S = 1000, 1000, 60.0, 3.0


def tensor(rows, d, seed):
    rnd = random.Random(seed)
    raw = struct.pack("<%df" % (rows * d), *(rnd.uniform(-1, 1) for _ in range(rows * d)))
    return {"shape": [rows, d], "dtype": "float32", "data": base64.b64encode(raw).decode()}


def big_body():
    return json.dumps({"q": tensor(BIG_N, BIG_D, 1), "k": tensor(BIG_N, BIG_D, 2),
                       "v": tensor(BIG_N, BIG_D, 3), "dtype": "float32",
                       "encoding": "base64", "return": ["output"]}).encode()


def small_body():
    rnd = random.Random(7)
    m = lambda: [[round(rnd.uniform(-1, 1), 4) for _ in range(SMALL_D)] for _ in range(SMALL_N)]
    return json.dumps({"q": m(), "k": m(), "v": m(), "return": ["output"]}).encode()


def post(conn, body, key):
    conn.request("POST", "/v1/attention", body, {"Content-Type": "application/json",
                                                 "Authorization": "Bearer " + key})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"{r.status} {data[:200]!r}")


def big_load(port, key, stop_at, done, count):
    """In its own process: BIG_IN_FLIGHT connections, each sending the next
    large request as soon as the last one is answered, until stop_at."""
    body = big_body()

    def one():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        while time.time() < stop_at and not done.is_set():
            post(c, body, key)
            with count.get_lock():
                count.value += 1
        c.close()

    ts = [threading.Thread(target=one) for _ in range(BIG_IN_FLIGHT)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def small_run(port, key, reqs, max_s):
    body = small_body()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    lat, end = [], time.time() + max_s
    while len(lat) < reqs and time.time() < end:
        t0 = time.perf_counter()
        post(c, body, key)
        lat.append(time.perf_counter() - t0)
    c.close()
    lat.sort()
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
    return {"n": len(lat), "p50": pick(0.50), "p99": pick(0.99)}


def in_flight(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics", headers={"Authorization": "Bearer small-key-0123456789"})
    text = c.getresponse().read().decode()
    c.close()
    for line in text.splitlines():
        if line.startswith("attnd_requests_in_flight "):
            return int(float(line.split()[1]))
    return 0


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/attnd"
    one = len(sys.argv) > 2 and sys.argv[2] == "one"
    big_key = "small-key-0123456789" if one else "big-key-0123456789"
    d = tempfile.mkdtemp(prefix="attnd-fair-")
    print("logs in", d)
    keys = os.path.join(d, "keys")
    with open(keys, "w") as f:
        f.write("small:small-key-0123456789\nbig:big-key-0123456789\n")
    os.chmod(keys, 0o600)
    port_file = os.path.join(d, "port")
    log = open(os.path.join(d, "log"), "wb")
    proc = subprocess.Popen([binary, "--port", "0", "--port-file", port_file,
                             "--api-key-file", keys], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 10
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError("attnd did not start")
            time.sleep(0.02)
        port = int(open(port_file).read())
        small_run(port, "small-key-0123456789", 30, 10)              # warm-up
        alone = small_run(port, "small-key-0123456789", ALONE_REQS, 30)
        stop_at = time.time() + WARM_S + LOADED_MAX_S + 30
        done = multiprocessing.Event()
        count = multiprocessing.Value("l", 0)
        load = multiprocessing.Process(target=big_load,
                                       args=(port, big_key, stop_at, done, count))
        load.start()
        t_warm = time.time() + WARM_S + 30
        while in_flight(port) < BIG_IN_FLIGHT and time.time() < t_warm:
            time.sleep(0.2)
        time.sleep(WARM_S)
        big_before, t0 = count.value, time.time()
        held = in_flight(port)
        loaded = small_run(port, "small-key-0123456789", LOADED_REQS, LOADED_MAX_S)
        big_rate = (count.value - big_before) / (time.time() - t0)
        done.set()
        load.join(timeout=LOADED_MAX_S + 60)
        if load.is_alive():
            load.terminate()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    ratio = loaded["p99"] / alone["p99"]
    ms = lambda s: "%.1f" % (s * 1000)
    print(f"small alone: {alone['n']} requests, p50 {ms(alone['p50'])} ms, p99 {ms(alone['p99'])} ms")
    print(f"small with {held - 1} requests in flight ({BIG_IN_FLIGHT} large kept): "
          f"{loaded['n']} requests, p50 {ms(loaded['p50'])} ms, p99 {ms(loaded['p99'])} ms")
    print(f"large n=L={BIG_N} d={BIG_D} answered meanwhile: {big_rate:.2f}/s")
    who = "its own 24 large requests (one client)" if one else "24 large requests"
    print(f"BENCHROW|fairness: small client p99 with {who} in flight|"
          f"small p99 alone|{ms(alone['p99'])} ms|-|-|{ms(loaded['p99'])}|ms|"
          f"{ratio:.2f} of alone|<=5 of alone|{'PASS' if ratio <= 5 else 'MISS'}")


if __name__ == "__main__":
    main()

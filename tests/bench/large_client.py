"""tests/bench/large_client.py — one large request end to end, timed from
the client, next to the same computation in-process (a benchmark).

    large_client.py BUILD URL PID REPS [N L D]

URL is a running attnd (PID, for its CPU time from /proc). The request is
an output-only float32 prefill, n = L = 2048, d = 128 by default, sent two
ways over one kept-alive connection:
  b64  POST /v1/attention, q/k/v base64 ("encoding": "base64"), output back
       in base64 (4.2 MB in, 1.4 MB out)
  v2   POST /v2/models/attention/infer, the binary tensor data extension in
       and out (3.1 MB in, 1 MB out)
Each round runs, in turn, BUILD/bench/bench_core's in-process prefill on 2
cores (BENCH_PREFILL: the compute alone, no parsing or transport), then
REPS requests of each kind; figures are medians over the rounds. The
client's time per request runs from the first byte sent to the last byte
of the response read (http.client; the body is encoded once beforehand),
so it holds the transport, parsing, base64 and the compute. Also printed:
the first request of each kind after attnd started (its buffers are new),
and attnd's CPU milliseconds per request (utime + stime) next to the
in-process pass's (all threads), which load from others on the machine
moves far less than wall time: their difference is what the transport,
parsing and base64 cost. Then attnd's minor page faults per request
(buffers faulted in afresh instead of reused), and this client's own CPU
per request (user + system: ~1.7 ms for base64, mostly the kernel's
loopback copies; curl sending the same body from a file costs the same,
so the Python client does not take a core from attnd's two). Last, the
loopback floor: the same bytes sent to a process that only receives them
and answers as many bytes as attnd does (Floor, timed at the end of each
round: between attnd's requests it slowed the next ones, v2's by 2-4 ms,
as it evicts attnd's kept buffers from the caches), next to attnd's time
outside the pass (client time - in-process time).

Prints BENCHROW lines (format: tests/bench/run.sh).
"""
import array
import base64
import http.client
import json
import os
import resource
import random
import statistics
import subprocess
import sys
import time
import urllib.parse

HDR = "Inference-Header-Content-Length"


def floats(rnd, count):
    return array.array("f", (rnd.uniform(-1, 1) for _ in range(count))).tobytes()


def bodies(n, L, d):
    rnd = random.Random(1)
    q, k, v = floats(rnd, n * d), floats(rnd, L * d), floats(rnd, L * d)

    def t(raw, rows):
        return '{"shape":[%d,%d],"dtype":"float32","data":"%s"}' % (
            rows, d, base64.b64encode(raw).decode())
    b64 = ('{"q":%s,"k":%s,"v":%s,"dtype":"float32","encoding":"base64","return":["output"]}'
           % (t(q, n), t(k, L), t(v, L))).encode()
    header = {"inputs": [{"name": nm, "shape": [rows, d], "datatype": "FP32",
                          "parameters": {"binary_data_size": len(raw)}}
                         for nm, raw, rows in (("q", q, n), ("k", k, L), ("v", v, L))],
              "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}
    js = json.dumps(header).encode()
    return b64, (js + q + k + v, len(js))


def stat_fields(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_ms(pid):
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def own_cpu_ms():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return (r.ru_utime + r.ru_stime) * 1e3


def minor_faults(pid):
    return int(stat_fields(pid)[7])


class Client:
    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)

    def post(self, path, body, headers):
        t0 = time.perf_counter()
        self.conn.request("POST", path, body=body, headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        dt = time.perf_counter() - t0
        if r.status != 200:
            raise SystemExit("large_client: %s answered %d: %s" % (path, r.status, data[:300]))
        return dt * 1e3, data, r


def _floor_server(conn, n_in, n_out):
    """Receive n_in bytes into one kept buffer, answer n_out bytes; repeat."""
    buf = bytearray(n_in)
    view = memoryview(buf)
    out = b"x" * n_out                  # written pages (bytes(n) may map the zero page)
    while True:
        got = 0
        while got < n_in:
            k = conn.recv_into(view[got:], min(n_in - got, 1 << 18))
            if k == 0:
                return
            got += k
        conn.sendall(out)


class Floor:
    """The same bytes in and out over loopback with nothing else done: a
    server process that only receives the body into a kept buffer and sends
    as many bytes as attnd's answer back (no HTTP, parsing or compute).
    once() is one round trip from this client, in ms: the transport's own
    floor on this machine, next to which attnd's time outside the pass is
    judged (timed in the same rounds as attnd's requests)."""

    def __init__(self, body, n_out):
        import multiprocessing
        import socket
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(1)

        def serve():
            c, _ = lsock.accept()
            _floor_server(c, len(body), n_out)
        self.proc = multiprocessing.get_context("fork").Process(target=serve, daemon=True)
        self.proc.start()
        self.conn = socket.create_connection(lsock.getsockname())
        lsock.close()
        self.body, self.view = body, memoryview(bytearray(n_out))

    def once(self):
        t0 = time.perf_counter()
        self.conn.sendall(self.body)
        got = 0
        while got < len(self.view):
            got += self.conn.recv_into(self.view[got:])
        return (time.perf_counter() - t0) * 1e3

    def close(self):
        self.conn.close()
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.terminate()


def main():
    build, url, pid, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    n, L, d = (int(x) for x in sys.argv[5:8]) if len(sys.argv) > 7 else (2048, 2048, 128)
    b64, (v2, v2_hdr) = bodies(n, L, d)
    kinds = {
        "b64": ("/v1/attention", b64, {"Content-Type": "application/json"}),
        "v2": ("/v2/models/attention/infer", v2,
               {"Content-Type": "application/octet-stream", HDR: str(v2_hdr)}),
    }
    cli = Client(url)
    first = {}
    first_faults = {}
    answer_bytes = {}
    for name, (path, body, hdrs) in kinds.items():
        f0 = minor_faults(pid)
        first[name], data, r = cli.post(path, body, hdrs)
        first_faults[name] = minor_faults(pid) - f0
        answer_bytes[name] = len(data)
        if name == "b64":
            out = json.loads(data)["output"]
            assert out["shape"] == [n, d] and len(base64.b64decode(out["data"])) == n * d * 4
        else:
            split = int(r.getheader(HDR))
            assert len(data) - split == n * d * 4, (len(data), split)
    floors = {name: Floor(body, answer_bytes[name]) for name, (_, body, _) in kinds.items()}
    floor = {k: [] for k in kinds}
    rounds = max(3, reps // 3)
    per = max(1, reps // rounds)
    inproc, inproc_cpu, wall, cpu = [], [], {k: [] for k in kinds}, {k: [] for k in kinds}
    faults = {k: 0 for k in kinds}
    client_cpu = {k: 0.0 for k in kinds}
    env = dict(os.environ, BENCH_PREFILL="%dx%dx%d" % (n, L, d))
    for _ in range(rounds):
        out = subprocess.run([build + "/bench/bench_core", "3"], env=env, check=True,
                             capture_output=True, text=True).stdout.split()
        inproc.append(float(out[1]))
        kernel = out[3]
        inproc_cpu.append(float(out[5]))
        for name, (path, body, hdrs) in kinds.items():
            c0, f0, o0 = cpu_ms(pid), minor_faults(pid), own_cpu_ms()
            for _ in range(per):
                wall[name].append(cli.post(path, body, hdrs)[0])
            client_cpu[name] += own_cpu_ms() - o0
            cpu[name].append(cpu_ms(pid) - c0)
            faults[name] += minor_faults(pid) - f0
        for name in kinds:      # after attnd's requests: moving these bytes
            floor[name] += [floors[name].once() for _ in range(per)]   # evicts its buffers
    for f in floors.values():
        f.close()
    comp = statistics.median(inproc)
    comp_cpu = statistics.median(inproc_cpu)
    print("  in-process prefill n=%d L=%d d=%d on 2 cores (kernel %s): %.2f ms (median of %d), "
          "CPU %.1f ms" % (n, L, d, kernel, comp, len(inproc), comp_cpu))
    for name in kinds:       # CPU: the total over all rounds (ticks of 10 ms)
        cpu[name] = [sum(cpu[name]) / len(wall[name])]
    for name in kinds:
        w = statistics.median(wall[name])
        print("  %-4s client %.2f ms per request (median of %d; first after start %.2f ms); "
              "attnd CPU %.1f ms per request (%.1f more than in-process); client / in-process %.2fx; "
              "page faults %.0f per request (first %d); client CPU %.1f ms per request"
              % (name, w, len(wall[name]), first[name], statistics.median(cpu[name]),
                 statistics.median(cpu[name]) - comp_cpu, w / comp,
                 faults[name] / len(wall[name]), first_faults[name],
                 client_cpu[name] / len(wall[name])))
    for name, (path, body, hdrs) in kinds.items():
        w = statistics.median(wall[name])
        print("  %-4s loopback floor (the same %d bytes in and %d out, nothing else done): "
              "%.2f ms (median of %d); attnd's time outside the pass %.2f ms"
              % (name, len(body), answer_bytes[name], statistics.median(floor[name]),
                 len(floor[name]), w - comp))
    label = {"b64": "base64 JSON in and out (/v1/attention)",
             "v2": "OIP v2 binary in and out (/v2 infer)"}
    for name in kinds:
        w = statistics.median(wall[name])
        print("BENCHROW|large request from the client: f32 n=L=%d d=%d output, %s"
              "|in-process compute ms|%.2f|-|-|%.2f|ms|%.2f of the in-process rate "
              "(client %.2fx in-process time)|>=0.85 of the in-process rate|%s"
              % (n, d, label[name], comp, w, comp / w, w / comp,
                 "PASS" if comp / w >= 0.85 else "MISS"))
    wb, wv = statistics.median(wall["b64"]), statistics.median(wall["v2"])
    print("BENCHROW|large request: OIP v2 binary vs base64 JSON (f32 n=L=%d d=%d)"
          "|base64 JSON client ms|%.2f|-|-|%.2f|ms|%.2fx base64's time|v2 at least as fast|%s"
          % (n, d, wb, wv, wv / wb, "PASS" if wv <= wb * 1.02 else "MISS"))


if __name__ == "__main__":
    main()

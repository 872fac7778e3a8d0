"""tests/e2e/attnd_proc.py — start the real attnd on a free port and talk HTTP to it.

Attnd(*flags, env=...) starts build/attnd (or $ATTND_BIN) with --port 0 and
--port-file (nofile=(soft, hard): with that RLIMIT_NOFILE; preexec: a
function run in the child before exec; host: the loopback address it listens
on and is spoken to at, 127.0.0.1 unless given), waits until /healthz answers, and
stops it on exit, removing its directory (logs() still answers). Its request()
speaks plain http.client so tests see exactly what a client sees: status,
headers and body bytes.

HTTPS: with --tls-cert among the flags, request() speaks TLS, checking the
chain against ca= when given. With ATTND_E2E_TLS=1 in the environment every
Attnd serves HTTPS with a certificate made once per run (make_ca,
make_cert), and connect() / suite_wrap() wrap raw sockets in TLS, so the
suite runs over TLS (.ci/run does) but for the page's Chromium tests, the
nginx topologies (plain HTTP to the replicas) and a half-close (TLS has
none).
"""
import atexit
import base64
import http.client
import json
import os
import resource
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time

BIN = os.environ.get("ATTND_BIN", "build/attnd")
# Every response request() receives is appended here (one JSON line each)
# when set; tests/e2e/test_e2e_zz_responses.py validates them against the
# OpenAPI document at the end of the suite (conftest.py sets it).
RECORD = os.environ.get("ATTND_E2E_RECORD")
RECORD_BODY_MAX = 1 << 20


def record(method, path, status, headers, body):
    """Append one response to RECORD (bodies over RECORD_BODY_MAX: none)."""
    if not RECORD:
        return
    text = None
    if body is not None and len(body) <= RECORD_BODY_MAX:
        text = body.decode("latin-1")
    line = {"method": method, "path": path.split("?")[0], "status": status,
            "content_type": headers.get("content-type"),
            "header_length": headers.get("inference-header-content-length"),
            "body": text}
    with open(RECORD, "a") as f:
        f.write(json.dumps(line) + "\n")
E2E_TLS = os.environ.get("ATTND_E2E_TLS") == "1"


def _openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(d, name):
    """A self-signed CA in d; returns its certificate's path (key beside it)."""
    cert, key = os.path.join(d, name + ".pem"), os.path.join(d, name + "-key.pem")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={name}")
    return cert


def make_cert(d, name, ca, cn, days=2, crl=None):
    """A server certificate for 127.0.0.1 signed by ca (make_ca's path);
    days < 0 makes one that has already expired; crl: a CRL distribution
    point URI. Returns (cert, key)."""
    cert, key = os.path.join(d, name + ".pem"), os.path.join(d, name + "-key.pem")
    csr, ext = os.path.join(d, name + ".csr"), os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        if crl:
            f.write(f"crlDistributionPoints=URI:{crl}\n")
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
             "-subj", f"/CN={cn}")
    _openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca[:-4] + "-key.pem",
             "-CAcreateserial", "-days", str(days), "-extfile", ext, "-out", cert)
    os.chmod(key, 0o600)
    return cert, key


_suite_pki = None


def suite_pki():
    """(ca, cert, key) shared by every Attnd of an ATTND_E2E_TLS run."""
    global _suite_pki
    if _suite_pki is None:
        d = tempfile.mkdtemp(prefix="attnd-e2e-pki-")
        atexit.register(shutil.rmtree, d, True)
        ca = make_ca(d, "ca")
        _suite_pki = (ca, *make_cert(d, "server", ca, "attnd e2e"))
    return _suite_pki


def client_context(ca=None):
    """TLS client context: verifying against ca, or not verifying at all."""
    if ca is None:
        c = ssl.create_default_context()
        c.check_hostname = False
        c.verify_mode = ssl.CERT_NONE
        return c
    return ssl.create_default_context(cafile=ca)


def suite_wrap(s, host="127.0.0.1"):
    """A connected socket s as the suite speaks: in TLS in an ATTND_E2E_TLS
    run (the handshake done here), else s itself."""
    if E2E_TLS:
        return client_context(suite_pki()[0]).wrap_socket(s, server_hostname=host)
    return s


def connect(port, timeout=10, host="127.0.0.1"):
    """A connected client socket to attnd: plain, or TLS in an ATTND_E2E_TLS run."""
    return suite_wrap(socket.create_connection((host, port), timeout=timeout), host)


def read_to_close(s, size=65536):
    """Every byte s receives until the peer closes."""
    data = b""
    while True:
        got = s.recv(size)
        if not got:
            return data
        data += got


def events(d):
    """attnd's log lines (d an Attnd) as JSON objects; a line that is not
    one, as a "raw" level with the line as its message."""
    out = []
    for line in d.logs().splitlines():
        try:
            e = json.loads(line)
            ok = isinstance(e, dict) and "level" in e and "msg" in e
            out.append(e if ok else {"level": "raw", "msg": line})
        except ValueError:
            out.append({"level": "raw", "msg": line})
    return out


def listening(d):
    """The "listening" event of d's log: what it serves, with which limits."""
    return next(e for e in events(d) if e["msg"] == "listening")


def http_connection(port, timeout=30, host="127.0.0.1"):
    """http.client connection to attnd: HTTPS in an ATTND_E2E_TLS run."""
    if E2E_TLS:
        return http.client.HTTPSConnection(host, port, timeout=timeout,
                                           context=client_context(suite_pki()[0]))
    return http.client.HTTPConnection(host, port, timeout=timeout)


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers          # dict, lower-case names
        self.body = body                # bytes

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<Response {self.status} {self.body[:200]!r}>"


class Attnd:
    def __init__(self, *flags, env=None, wait=True, ca=None, nofile=None, preexec=None,
                 host="127.0.0.1"):
        self.host = host
        self.tmp = tempfile.mkdtemp(prefix="attnd-e2e-")    # removed by stop()
        self.final_logs = None
        self.tls = "--tls-cert" in flags
        self.ca = ca
        if E2E_TLS and not self.tls:
            self.ca, cert, key = suite_pki()
            flags = (*flags, "--tls-cert", cert, "--tls-key", key)
            self.tls = True
        self.port_file = os.path.join(self.tmp, "port")
        self.log_path = os.path.join(self.tmp, "log")
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.log = open(self.log_path, "wb")
        def child():                # in the child, before exec
            if nofile:              # (soft, hard) RLIMIT_NOFILE of the daemon
                resource.setrlimit(resource.RLIMIT_NOFILE, nofile)
            if preexec:
                preexec()
        self.proc = subprocess.Popen(
            [BIN, "--host", host, "--port", "0", "--port-file", self.port_file, *flags],
            stdout=self.log, stderr=subprocess.STDOUT, env=full_env,
            preexec_fn=child if nofile or preexec else None)
        self.port = None
        if wait:
            try:
                self.wait_ready()
            except BaseException:
                self.stop()                 # no daemon or directory left behind
                raise

    def wait_ready(self, timeout=10.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"attnd exited with {self.proc.returncode}: {self.logs()}")
            try:
                with open(self.port_file) as f:
                    text = f.read().strip()
                if text:
                    self.port = int(text)
                    if self.request("GET", "/healthz").status == 200:
                        return
            except (OSError, ValueError, ConnectionError):
                pass
            time.sleep(0.02)
        raise RuntimeError("attnd did not become healthy: " + self.logs())

    @property
    def url(self):
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def connection(self, timeout=30):
        if self.tls:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=client_context(self.ca))
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=30):
        """body: dict/list (sent as JSON), str or bytes."""
        hdrs = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            body = body.encode()
        conn = self.connection(timeout)
        try:
            conn.request(method, path, body=body, headers=hdrs)
            r = conn.getresponse()
            data = r.read()
            hdrs = {k.lower(): v for k, v in r.getheaders()}
            record(method, path, r.status, hdrs, None if method == "HEAD" else data)
            return Response(r.status, hdrs, data)
        finally:
            conn.close()

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def metric(self, name, headers=None):
        """The value of an unlabelled metric in GET /metrics (an int)."""
        body = self.request("GET", "/metrics", headers=headers).body.decode()
        for line in body.splitlines():
            if line.startswith(name + " "):
                return int(float(line.split()[1]))
        raise AssertionError(f"no {name} in /metrics")

    def logs(self):
        if self.final_logs is not None:     # stopped: its directory is gone
            return self.final_logs
        try:
            if not self.log.closed:
                self.log.flush()
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait(self, timeout=15):
        return self.proc.wait(timeout=timeout)

    def drain_held_open(self, request):
        """SIGTERM while `request` (raw bytes, its body unfinished) is in
        flight on a connection of its own, which holds the drain open;
        returns that connection's socket once attnd logs that it drains."""
        s = connect(self.port, timeout=30)
        s.sendall(request)
        while self.metric("attnd_requests_in_flight") < 2:  # the upload and this scrape
            time.sleep(0.02)
        self.signal(signal.SIGTERM)
        deadline = time.time() + 10
        while "draining (SIGTERM)" not in self.logs():
            assert time.time() < deadline, self.logs()
            time.sleep(0.02)
        return s

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if self.final_logs is None:         # the log outlives the directory
            self.final_logs = self.logs()
            shutil.rmtree(self.tmp, ignore_errors=True)
        if self.proc.returncode:
            # pytest shows a failing test's output: a sanitizer's report
            # or an abort's message reaches CI's log this way.
            sys.stdout.write(self.logs()[-20000:])
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def append_random_rows(a, sid, heads, d, rows, rng, chunk=None):
    """Append `rows` rows of float32 values uniform in [-2, 2) to session
    sid (k and v the same tensor, base64), `chunk` rows a request."""
    chunk = chunk or rows
    n = heads * chunk * d
    for _ in range(rows // chunk):
        t = {"shape": [heads, chunk, d], "dtype": "float32", "data": base64.b64encode(
            struct.pack("<%df" % n, *(rng.uniform(-2, 2) for _ in range(n)))).decode()}
        r = a.post(f"/v1/sessions/{sid}/kv", {"k": t, "v": t})
        assert r.status == 200, r

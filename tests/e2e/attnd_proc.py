"""tests/e2e/attnd_proc.py — start the real attnd on a free port and talk HTTP to it.

Attnd(*flags, env=...) starts build/attnd (or $ATTND_BIN) with --port 0 and
--port-file, waits until /healthz answers, and stops it on exit. Its request()
speaks plain http.client so tests see exactly what a client sees: status,
headers and body bytes.
"""
import http.client
import json
import os
import signal
import subprocess
import tempfile
import time

BIN = os.environ.get("ATTND_BIN", "build/attnd")


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
    def __init__(self, *flags, env=None, wait=True):
        self.tmp = tempfile.mkdtemp(prefix="attnd-e2e-")
        self.port_file = os.path.join(self.tmp, "port")
        self.log_path = os.path.join(self.tmp, "log")
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [BIN, "--host", "127.0.0.1", "--port", "0", "--port-file", self.port_file, *flags],
            stdout=self.log, stderr=subprocess.STDOUT, env=full_env)
        self.port = None
        if wait:
            self.wait_ready()

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
        return f"http://127.0.0.1:{self.port}"

    def request(self, method, path, body=None, headers=None, timeout=30):
        """body: dict/list (sent as JSON), str or bytes."""
        hdrs = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            body = body.encode()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=hdrs)
            r = conn.getresponse()
            data = r.read()
            return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
        finally:
            conn.close()

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def logs(self):
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

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

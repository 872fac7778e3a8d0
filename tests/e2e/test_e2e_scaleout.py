"""tests/e2e/test_e2e_scaleout.py — docker/nginx.conf in front of three attnd.

Runs the very file that docker/compose.yml mounts into the nginx container,
with its documented placeholders (${NGINX_LISTEN}, ${ATTND_R1..3}, ...)
replaced by loopback addresses, the ids r1..r3 and their upstreams, under Debian's nginx, in front of three attnd processes
started with --replica-id r1/r2/r3. Checks: session ids carry the replica
prefix and every request of a session reaches that replica; stateless load
spreads over all three; stopping one replica leaves the other replicas'
sessions working while its own answer a clean JSON 503, and stateless
requests keep working.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from attnd_proc import E2E_TLS, Attnd, Response

# nginx speaks plain HTTP to the replicas (TLS, if any, ends at nginx), so
# this file has nothing to check in an ATTND_E2E_TLS run.
pytestmark = pytest.mark.skipif(E2E_TLS, reason="nginx -> replicas is plain HTTP")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONF = os.path.join(ROOT, "docker", "nginx.conf")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
PLACEHOLDERS = {"NGINX_LISTEN", "NGINX_RESOLVER"} | \
    {f"ATTND_{k}{i}" for k in ("R", "ID", "S") for i in (1, 2, 3)}

ATT = {"q": [[1, 0], [0, 1]], "k": [[1, 0], [0, 1], [1, 1]], "v": [[1, 2], [3, 4], [5, 6]]}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render(values):
    """The template with exactly its documented placeholders filled in."""
    with open(CONF) as f:
        text = f.read()
    found = set(re.findall(r"\$\{(\w+)\}", text))
    assert found == PLACEHOLDERS, f"placeholders drifted: {found}"
    return re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], text)


class Nginx:
    def __init__(self, upstreams):
        self.dir = tempfile.mkdtemp(prefix="attnd-nginx-")
        self.port = free_port()
        values = {"NGINX_LISTEN": f"127.0.0.1:{self.port}", "NGINX_RESOLVER": "127.0.0.1"}
        for i, u in enumerate(upstreams):
            values.update({f"ATTND_R{i + 1}": u, f"ATTND_ID{i + 1}": f"r{i + 1}",
                           f"ATTND_S{i + 1}": f"attnd_r{i + 1}"})
        with open(os.path.join(self.dir, "attnd.conf"), "w") as f:
            f.write(render(values))
        d = self.dir
        # The main context a distribution's nginx.conf provides; the tested
        # file is included unchanged, like conf.d/default.conf in the image.
        main = f"""
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
    # which replica answered each request, by its X-Request-Id (nginx.conf,
    # Diagnostics: the answers do not say)
    log_format attnd_up '$request_id $upstream_addr';
    access_log {d}/access.log attnd_up;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    include {d}/attnd.conf;
}}
"""
        if os.geteuid() == 0:
            main = "user root;\n" + main
        self.main = os.path.join(d, "nginx.conf")
        with open(self.main, "w") as f:
            f.write(main)
        self.proc = None

    def check(self):
        return subprocess.run([NGINX, "-t", "-p", self.dir, "-e", os.path.join(self.dir, "error.log"),
                               "-c", self.main], capture_output=True, text=True)

    def start(self):
        self.proc = subprocess.Popen([NGINX, "-p", self.dir, "-e", os.path.join(self.dir, "error.log"),
                                      "-c", self.main, "-g", "daemon off;"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 10
        while time.time() < deadline:
            assert self.proc.poll() is None, self.proc.stderr.read().decode()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nginx did not listen")

    def request(self, method, path, body=None, headers=None):
        hdrs = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=hdrs)
            r = conn.getresponse()
            return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    def upstream(self, r):
        """The replica address(es) nginx tried for the answer r, from its
        access log (nginx writes the line just after the answer)."""
        rid = r.headers["x-request-id"]
        deadline = time.time() + 5
        while True:
            with open(os.path.join(self.dir, "access.log")) as f:
                for line in f:
                    got, _, up = line.rstrip("\n").partition(" ")
                    if got == rid:
                        return up
            assert time.time() < deadline, f"no access log line for {rid}"
            time.sleep(0.02)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_template_placeholders_are_the_documented_ones():
    values = {k: "127.0.0.1:1" for k in PLACEHOLDERS}
    values.update({f"ATTND_ID{i}": f"r{i}" for i in (1, 2, 3)})
    values.update({f"ATTND_S{i}": f"attnd_r{i}" for i in (1, 2, 3)})
    text = render(values)
    assert "${" not in text
    # the map has one line per replica, each naming its own upstream
    for i in (1, 2, 3):
        assert re.search(rf'"~\^/v1/sessions/r{i}\\\."\s+attnd_r{i};', text)


def test_unreachable_replicas_answer_json_in_the_protocol_shape():
    if not os.path.exists(NGINX):
        pytest.fail("nginx is required (Debian package nginx, in the Makefile's DEPS_TEST)")
    dead = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    ng = Nginx(dead)
    try:
        ng.start()
        r = ng.request("POST", "/v1/attention", ATT)
        assert r.status == 503 and r.json()["error"]["code"] == "replica_unavailable"
        r = ng.request("GET", "/v1/sessions/r1.AAAA")
        assert r.status == 503 and r.json()["error"]["code"] == "replica_unavailable"
        r = ng.request("GET", "/v2/health/ready")
        assert r.status == 503 and r.headers["content-type"] == "application/json"
        assert isinstance(r.json()["error"], str)
    finally:
        ng.stop()


@pytest.fixture(scope="module")
def cluster():
    if not os.path.exists(NGINX):
        pytest.fail("nginx is required (Debian package nginx, in the Makefile's DEPS_TEST)")
    reps = [Attnd("--replica-id", f"r{i}") for i in (1, 2, 3)]
    ng = Nginx([f"127.0.0.1:{r.port}" for r in reps])
    try:
        t = ng.check()
        assert t.returncode == 0, t.stderr
        ng.start()
        yield ng, reps
    finally:
        ng.stop()
        for r in reps:
            r.stop()


def create_session(ng):
    r = ng.request("POST", "/v1/sessions", {"d_k": 2, "d_v": 2})
    assert r.status == 201, r
    assert "x-attnd-upstream" not in r.headers, "internal addresses sent to the client"
    return r.json()["id"], ng.upstream(r)


def test_stateless_load_spreads(cluster):
    ng, reps = cluster
    seen = {}
    for _ in range(12):
        r = ng.request("POST", "/v1/attention", ATT)
        assert r.status == 200, r
        assert len(r.json()["output"]) == 2
        up = ng.upstream(r)
        seen[up] = seen.get(up, 0) + 1
    assert set(seen) == {f"127.0.0.1:{r.port}" for r in reps}, seen


def test_every_session_request_reaches_its_replica(cluster):
    ng, reps = cluster
    addr = {f"r{i + 1}": f"127.0.0.1:{r.port}" for i, r in enumerate(reps)}
    ids = [create_session(ng) for _ in range(6)]
    prefixes = {sid.split(".")[0] for sid, _ in ids}
    assert len(prefixes) >= 2, f"creates were not balanced: {ids}"
    for sid, created_on in ids:
        rid = sid.split(".")[0]
        assert rid in addr, sid
        assert created_on == addr[rid], (sid, created_on)
        kv = {"k": [[1, 0], [0, 1]], "v": [[1, 2], [3, 4]]}
        steps = [("POST", f"/v1/sessions/{sid}/kv", kv),
                 ("POST", f"/v1/sessions/{sid}/attention", {"q": [[1, 0]], "k": [[1, 1]], "v": [[5, 6]]}),
                 ("GET", f"/v1/sessions/{sid}", None),
                 ("GET", f"/v1/sessions/{sid}/kv", None)]
        for method, path, body in steps:
            r = ng.request(method, path, body)
            assert r.status == 200, (path, r)
            assert ng.upstream(r) == addr[rid]
        assert ng.request("GET", f"/v1/sessions/{sid}").json()["length"] == 3
        # the replica itself knows the session; the others do not
        for other, rep in zip(("r1", "r2", "r3"), reps):
            got = rep.get(f"/v1/sessions/{sid}").status
            assert got == (200 if other == rid else 404), (sid, other, got)


def test_unknown_prefix_is_a_clean_404(cluster):
    ng, _ = cluster
    for path in ("/v1/sessions/r9.AAAAAAAAAAAAAAAAAAAAAA", "/v1/sessions/noprefix/kv"):
        r = ng.request("GET", path)
        assert r.status == 404
        assert r.headers["content-type"].startswith("application/json")
        assert r.json()["error"]["code"] == "session_not_found"


def test_stopping_a_replica_fails_only_its_sessions(cluster):
    ng, reps = cluster
    by_replica = {}
    for _ in range(30):
        sid, _ = create_session(ng)
        by_replica.setdefault(sid.split(".")[0], sid)
        if len(by_replica) == 3:
            break
    assert len(by_replica) == 3, by_replica
    victim = reps[1]                          # r2
    victim.stop()
    r = ng.request("GET", f"/v1/sessions/{by_replica['r2']}")
    assert r.status == 503, r
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert err["code"] == "replica_unavailable" and err["message"]
    assert "retry-after" in r.headers
    for rid in ("r1", "r3"):
        r = ng.request("POST", f"/v1/sessions/{by_replica[rid]}/kv", {"k": [[1, 0]], "v": [[1, 1]]})
        assert r.status == 200, (rid, r)
    # stateless traffic goes on over the two replicas left
    seen = set()
    for _ in range(8):
        r = ng.request("POST", "/v1/attention", ATT)
        assert r.status == 200, r
        seen.add(ng.upstream(r).split(",")[-1].strip())
    assert f"127.0.0.1:{victim.port}" not in seen
    # and new sessions are created on live replicas only
    for _ in range(4):
        sid, _ = create_session(ng)
        assert not sid.startswith("r2.")

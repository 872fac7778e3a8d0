"""tests/e2e/test_e2e_scaleout.py — docker/nginx.conf in front of attnd
replicas, as docker/compose.yml runs it.

Runs the very file that docker/compose.yml mounts into the nginx container,
with the values compose.yml gives its placeholders (the pool alias
attnd-pool, the id pattern, the host name's prefix and suffix), under
Debian's nginx, in front of attnd processes started with --replica-id r1..
(compose.yml's ids). As in a compose network, each replica has an address of
its own (127.x.y.n, all on one port) and a name in a DNS server
(tests/e2e/dns_stub.py: its service name attnd-rN, and attnd-pool for every
replica that is up), which nginx asks per request.
Checks: session ids carry the replica prefix and every request of a session
reaches that replica; stateless load spreads over all replicas; an id that
the pattern does not match reaches no host; stopping one replica leaves the
other replicas' sessions working while its own answer a clean JSON 503, and
stateless requests keep working; nginx starts while a replica is down and
reaches it once it is up; a replica recreated at a new address is reached
there; sessions saved in a replica's state dir under the ids compose has
always given (r2.…) are reached after an upgrade.
"""
import base64
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time

import pytest
import yaml

from attnd_proc import E2E_TLS, Attnd, Response
from dns_stub import DnsStub

# nginx speaks plain HTTP to the replicas (TLS, if any, ends at nginx), so
# this file has nothing to check in an ATTND_E2E_TLS run.
pytestmark = pytest.mark.skipif(E2E_TLS, reason="nginx -> replicas is plain HTTP")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONF = os.path.join(ROOT, "docker", "nginx.conf")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
PLACEHOLDERS = {"NGINX_LISTEN", "NGINX_RESOLVER", "ATTND_POOL", "ATTND_ID_RE",
                "ATTND_HOST_PREFIX", "ATTND_HOST_SUFFIX"}
# The port compose.yml and k8s.yaml give the replicas; the tests put theirs
# in its place.
FILE_PORT = ":8080"

ATT = {"q": [[1, 0], [0, 1]], "k": [[1, 0], [0, 1], [1, 1]], "v": [[1, 2], [3, 4], [5, 6]]}


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def render(values):
    """The template with exactly its documented placeholders filled in."""
    with open(CONF) as f:
        text = f.read()
    found = set(re.findall(r"\$\{(\w+)\}", text))
    assert found == PLACEHOLDERS, f"placeholders drifted: {found}"
    return re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], text)


def compose_values():
    """The values docker/compose.yml gives the placeholders (NGINX_RESOLVER
    is found in the container, docker/nginx-resolver.envsh)."""
    with open(os.path.join(ROOT, "docker", "compose.yml")) as f:
        env = yaml.safe_load(f)["services"]["nginx"]["environment"]
    return {k: str(v) for k, v in env.items() if k in PLACEHOLDERS}


def compose_replica_ids():
    """docker/compose.yml's replicas: service name -> ATTND_REPLICA_ID."""
    with open(os.path.join(ROOT, "docker", "compose.yml")) as f:
        svcs = yaml.safe_load(f)["services"]
    return {n: str(s["environment"]["ATTND_REPLICA_ID"]) for n, s in svcs.items()
            if n.startswith("attnd-")}


def need_nginx():
    if not os.path.exists(NGINX):
        pytest.fail("nginx is required (Debian package nginx, in the Makefile's DEPS_TEST)")


class Nginx:
    def __init__(self, values):
        """values: every placeholder but NGINX_LISTEN, which it picks."""
        self.dir = tempfile.mkdtemp(prefix="attnd-nginx-")
        self.port = free_port()
        values = dict(values, NGINX_LISTEN=f"127.0.0.1:{self.port}")
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
    log_format attnd_up '$attnd_request_id $upstream_addr';
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


class Cluster:
    """Replicas behind nginx as one deployment file (values) runs them:
    each replica listens on an address of its own, all on one port, and is
    named in a DnsStub as the file's placeholders name it (ATTND_HOST_PREFIX,
    the id, then ATTND_HOST_SUFFIX; the pool name with the address of every
    replica that is up). start(id) starts a replica (at a new address each time, as a
    recreated container or pod gets), stop(id) stops it and takes its name
    out of the DNS, as Docker's DNS and a headless Service do."""

    def __init__(self, values):
        self.net = f"127.{random.randrange(16, 250)}.{random.randrange(256)}."
        self.hosts = 0
        self.port = free_port(self.net + "1")
        self.dns = DnsStub()
        self.values = {k: v.replace(FILE_PORT, f":{self.port}") for k, v in values.items()}
        self.values["NGINX_RESOLVER"] = self.dns.address
        self.pool_name = self.values["ATTND_POOL"].rsplit(":", 1)[0]
        self.prefix = self.values["ATTND_HOST_PREFIX"]
        self.suffix = self.values["ATTND_HOST_SUFFIX"].rsplit(":", 1)[0]
        self.reps = {}                      # id -> Attnd (up)
        self.nginx = Nginx(self.values)

    def name(self, rid):
        """The host name nginx asks for rid's sessions."""
        return self.prefix + rid + self.suffix

    def addr(self, rid):
        return f"{self.reps[rid].host}:{self.port}"

    def start(self, rid, *flags):
        self.hosts += 1
        host = self.net + str(self.hosts)
        self.reps[rid] = Attnd("--replica-id", rid, "--port", str(self.port), *flags, host=host)
        self.dns.set(self.name(rid), host)
        self._pool()
        return self.reps[rid]

    def stop(self, rid, sig=signal.SIGTERM):
        rep = self.reps.pop(rid)
        self.dns.set(self.name(rid))
        self._pool()
        rep.proc.send_signal(sig)
        rep.proc.wait(timeout=15)
        rep.stop()

    def _pool(self):
        self.dns.set(self.pool_name, *(r.host for r in self.reps.values()))

    def close(self):
        self.nginx.stop()
        for r in self.reps.values():
            r.stop()
        self.dns.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def until(what, fn, secs=30):
    """fn()'s first true answer within secs (nginx keeps a name's answer for
    valid=5s, so a change in the DNS shows within that), else a failure."""
    deadline = time.time() + secs
    while True:
        got = fn()
        if got:
            return got
        assert time.time() < deadline, f"not within {secs} s: {what}"
        time.sleep(0.2)


def test_template_placeholders_are_the_documented_ones():
    text = render(dict(compose_values(), NGINX_LISTEN="8080", NGINX_RESOLVER="127.0.0.11"))
    assert "${" not in text
    # one map line makes every replica's host from its id: r2 -> attnd-r2:8080
    assert re.search(r'"~\^/v1/sessions/\(r\[0-9\]\{1,3\}\)\\\."\s+attnd-\$1:8080;', text), text
    # no upstream block: nginx would resolve its names only when it starts
    assert not re.search(r"^\s*upstream\s", text, re.M)
    for target in re.findall(r"proxy_pass\s+(\S+);", text):
        assert target.startswith("http://$"), target


def test_unreachable_replicas_answer_json_in_the_protocol_shape():
    need_nginx()
    dns = DnsStub()
    dns.set("attnd-pool", "127.0.0.1")              # nothing listens there
    port = free_port()
    values = {k: v.replace(FILE_PORT, f":{port}") for k, v in compose_values().items()}
    values["NGINX_RESOLVER"] = dns.address
    ng = Nginx(values)
    try:
        ng.start()
        r = ng.request("POST", "/v1/attention", ATT)
        assert r.status == 503 and r.json()["error"]["code"] == "replica_unavailable"
        # a replica whose name has no address (stopped), as one that refuses
        r = ng.request("GET", "/v1/sessions/r1.AAAA")
        assert r.status == 503 and r.json()["error"]["code"] == "replica_unavailable"
        dns.set("attnd-r2", "127.0.0.1")
        r = ng.request("GET", "/v1/sessions/r2.AAAA")
        assert r.status == 503 and r.json()["error"]["code"] == "replica_unavailable"
        r = ng.request("GET", "/v2/health/ready")
        assert r.status == 503 and r.headers["content-type"] == "application/json"
        assert isinstance(r.json()["error"], str)
        # the code ends the text, as in attnd's v2 errors
        r = ng.request("POST", "/v2/models/attention/infer", {"inputs": []})
        assert r.status == 503 and r.json()["error"].endswith(" [replica_unavailable]"), r
    finally:
        ng.stop()
        dns.close()


@pytest.fixture(scope="module")
def cluster():
    need_nginx()
    with Cluster(compose_values()) as c:
        for i in (1, 2, 3):
            c.start(f"r{i}")
        t = c.nginx.check()
        assert t.returncode == 0, t.stderr
        c.nginx.start()
        yield c


def create_session(ng):
    r = ng.request("POST", "/v1/sessions", {"d_k": 2, "d_v": 2})
    assert r.status == 201, r
    assert "x-attnd-upstream" not in r.headers, "internal addresses sent to the client"
    return r.json()["id"], ng.upstream(r)


def test_stateless_load_spreads(cluster):
    ng = cluster.nginx
    seen = {}
    # nginx starts each request at a random one of the pool's addresses: in
    # 60 requests, each of three is missed with probability 3 * (2/3)^60
    for _ in range(60):
        r = ng.request("POST", "/v1/attention", ATT)
        assert r.status == 200, r
        assert len(r.json()["output"]) == 2
        up = ng.upstream(r)
        seen[up] = seen.get(up, 0) + 1
    assert set(seen) == {cluster.addr(rid) for rid in cluster.reps}, seen


def test_every_session_request_reaches_its_replica(cluster):
    ng = cluster.nginx
    # creates start at a random replica: six of them all landed on one
    # replica once (3 * (1/3)^6, 0.4%); go on until two replicas hold some,
    # at most 30 (all on one: 3 * (1/3)^30)
    ids = [create_session(ng) for _ in range(6)]
    while len({sid.split(".")[0] for sid, _ in ids}) < 2 and len(ids) < 30:
        ids.append(create_session(ng))
    prefixes = {sid.split(".")[0] for sid, _ in ids}
    assert len(prefixes) >= 2, f"creates were not balanced: {ids}"
    for sid, created_on in ids:
        rid = sid.split(".")[0]
        assert rid in cluster.reps, sid
        assert created_on == cluster.addr(rid), (sid, created_on)
        kv = {"k": [[1, 0], [0, 1]], "v": [[1, 2], [3, 4]]}
        steps = [("POST", f"/v1/sessions/{sid}/kv", kv),
                 ("POST", f"/v1/sessions/{sid}/attention", {"q": [[1, 0]], "k": [[1, 1]], "v": [[5, 6]]}),
                 ("GET", f"/v1/sessions/{sid}", None),
                 ("GET", f"/v1/sessions/{sid}/kv", None)]
        for method, path, body in steps:
            r = ng.request(method, path, body)
            assert r.status == 200, (path, r)
            assert ng.upstream(r) == cluster.addr(rid)
        assert ng.request("GET", f"/v1/sessions/{sid}").json()["length"] == 3
        # the replica itself knows the session; the others do not
        for other, rep in cluster.reps.items():
            got = rep.get(f"/v1/sessions/{sid}").status
            assert got == (200 if other == rid else 404), (sid, other, got)


# Ids a client may send that ATTND_ID_RE must not turn into a host, or that
# name a replica with something after it (still that replica, nothing else).
# A replica's host name is not its id: attnd-r1 reaches no host either.
HOSTILE = ["/v1/sessions/attnd-r1.AAAAAAAAAAAAAAAAAAAAAA", "/v1/sessions/noprefix/kv",
           "/v1/sessions/evil.example.AAAA", "/v1/sessions/r1x.AAAA",
           "/v1/sessions/r1:22.AAAA", "/v1/sessions/r1@evil.example.AAAA",
           "/v1/sessions/r1%2Fevil.AAAA", "/v1/sessions/r12345.AAAA",
           "/v1/sessions/127.0.0.1:22.AAAA", "/v1/sessions/R1.AAAA",
           "/v1/sessions/r1%20evil.AAAA", "/v1/sessions/.r1.AAAA",
           "/v1/sessions/-r1.AAAA", "/v1/sessions/xr1.AAAA"]
NAMED = ["/v1/sessions/r1.evil.example/kv", "/v1/sessions/r1%2Eevil.example.AAAA"]


def test_an_id_reaches_no_host_but_a_replica(cluster):
    ng, dns = cluster.nginx, cluster.dns
    for path in HOSTILE:
        r = ng.request("GET", path)
        assert r.status == 404, (path, r)
        assert r.headers["content-type"].startswith("application/json")
        assert r.json()["error"]["code"] == "session_not_found"
    for path in NAMED:                      # attnd-r1's: it answers that it has no such session
        r = ng.request("GET", path)
        assert r.status == 404 and ng.upstream(r) == cluster.addr("r1"), (path, r)
    allowed = {cluster.pool_name} | {cluster.name(f"r{i}") for i in (1, 2, 3)}
    assert dns.names_asked() <= allowed, dns.names_asked() - allowed


def test_stopping_a_replica_fails_only_its_sessions(cluster):
    ng = cluster.nginx
    by_replica = {}
    for _ in range(30):
        sid, _ = create_session(ng)
        by_replica.setdefault(sid.split(".")[0], sid)
        if len(by_replica) == 3:
            break
    assert len(by_replica) == 3, by_replica
    # a crash: the process is gone, its name and address still in the DNS
    victim = cluster.reps["r2"]
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(timeout=10)
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
    assert cluster.addr("r2") not in seen
    # and new sessions are created on live replicas only
    for _ in range(4):
        sid, _ = create_session(ng)
        assert not sid.startswith("r2.")


@pytest.mark.parametrize("name", ["ATTND_ID_RE", "ATTND_HOST_PREFIX", "ATTND_HOST_SUFFIX"])
def test_a_placeholder_left_unset_stops_nginx(name):
    """The entrypoints leave an unset variable's ${NAME} in the file. Left in
    the session map's regular expression, it would be taken as it is and
    every session would answer 404; nginx must refuse the file instead."""
    need_nginx()
    values = dict(compose_values(), NGINX_RESOLVER="127.0.0.1:53")
    values[name] = "${%s}" % name
    ng = Nginx(values)
    try:
        t = ng.check()
        assert t.returncode != 0, t.stderr
        assert f'unknown "{name.lower()}" variable' in t.stderr, t.stderr
        # with every placeholder set, the same file loads
        ok = Nginx(dict(compose_values(), NGINX_RESOLVER="127.0.0.1:53"))
        try:
            assert ok.check().returncode == 0
        finally:
            ok.stop()
    finally:
        ng.stop()


def test_a_replica_down_when_nginx_starts_fails_only_its_sessions():
    """Review 2.2: with upstream blocks, nginx resolved the replicas' names
    when it started, and stopped ("host not found in upstream") if one was
    down: every route was down."""
    need_nginx()
    with Cluster(compose_values()) as c:
        c.start("r1")
        c.start("r3")
        t = c.nginx.check()
        assert t.returncode == 0, t.stderr
        c.nginx.start()
        ng = c.nginx
        for _ in range(6):
            assert ng.request("POST", "/v1/attention", ATT).status == 200
            sid, _ = create_session(ng)
            assert sid.split(".")[0] in ("r1", "r3"), sid
            assert ng.request("GET", f"/v1/sessions/{sid}").status == 200
        r = ng.request("GET", "/v1/sessions/r2.AAAAAAAAAAAAAAAAAAAAAA")
        assert r.status == 503 and r.json()["error"]["code"] == "replica_unavailable", r
        # attnd-r2 comes up: its sessions are reached, and it joins the pool
        rep = c.start("r2")
        r = rep.post("/v1/sessions", {"d_k": 2, "d_v": 2})
        assert r.status == 201, r
        sid = r.json()["id"]
        until("r2's session through nginx",
              lambda: ng.request("GET", f"/v1/sessions/{sid}").status == 200)
        until("a stateless request on attnd-r2",
              lambda: ng.upstream(ng.request("POST", "/v1/attention", ATT)) == c.addr("r2"))


def test_a_recreated_replica_is_reached_at_its_new_address():
    """Review 2.2: a replica's container recreated (docker compose up -d
    after an image change) comes back at another address; nginx kept the
    address it resolved at start, and the replica's sessions answered 503
    until nginx was restarted."""
    need_nginx()
    state = tempfile.mkdtemp(prefix="attnd-scaleout-r2-")
    try:
        with Cluster(compose_values()) as c:
            for i in (1, 2, 3):
                c.start(f"r{i}", *(("--state-dir", state) if i == 2 else ()))
            c.nginx.start()
            ng = c.nginx
            r = c.reps["r2"].post("/v1/sessions", {"d_k": 2, "d_v": 2})
            sid = r.json()["id"]
            assert ng.request("POST", f"/v1/sessions/{sid}/kv",
                              {"k": [[1, 0]], "v": [[1, 2]]}).status == 200
            old = c.addr("r2")
            c.stop("r2")                            # drains, saves the session
            c.start("r2", "--state-dir", state)     # the same volume, a new address
            assert c.addr("r2") != old

            def answered():
                r = ng.request("GET", f"/v1/sessions/{sid}")
                return r.status == 200 and r
            r = until("the recreated replica's session through nginx", answered)
            assert r.json()["length"] == 1
            assert ng.upstream(r) == c.addr("r2")
    finally:
        shutil.rmtree(state, ignore_errors=True)


def test_sessions_saved_under_the_compose_ids_are_reached_after_an_upgrade():
    """compose.yml's replicas run with the ids r1, r2, r3, and their volumes
    hold the sessions they made under them ("r2.…"). After an upgrade, the
    service attnd-r2 starts on its volume with compose.yml's id and nginx
    with compose.yml's values: the saved sessions must be reached through
    nginx at attnd-r2. With the ids renamed to the service names (attnd-r2,
    pattern attnd-r[0-9]{1,3}), nginx answered them 404."""
    need_nginx()
    state = tempfile.mkdtemp(prefix="attnd-scaleout-upgrade-")
    try:
        # what the service attnd-r2 of an earlier release left in its volume
        with Attnd("--replica-id", "r2", "--state-dir", state) as before:
            r = before.post("/v1/sessions", {"d_k": 2, "d_v": 2})
            assert r.status == 201, r
            sid = r.json()["id"]
            assert sid.startswith("r2."), sid
            assert before.post(f"/v1/sessions/{sid}/kv",
                               {"k": [[1, 0], [0, 1]], "v": [[1, 2], [3, 4]]}).status == 200
        rid = compose_replica_ids()["attnd-r2"]
        with Cluster(compose_values()) as c:
            rep = c.start(rid, "--state-dir", state)
            c.nginx.start()
            ng = c.nginx
            r = ng.request("GET", f"/v1/sessions/{sid}")
            assert r.status == 200, r
            assert r.json()["length"] == 2
            assert ng.upstream(r) == c.addr(rid)
            # nginx found it by the service's name
            assert "attnd-r2" in c.dns.names_asked(), c.dns.names_asked()
            r = ng.request("POST", f"/v1/sessions/{sid}/kv", {"k": [[1, 1]], "v": [[5, 6]]})
            assert r.status == 200 and r.json()["length"] == 3, r
            # and the sessions it makes from now on carry the same prefix
            r = rep.post("/v1/sessions", {"d_k": 2, "d_v": 2})
            assert r.status == 201 and r.json()["id"].startswith("r2."), r
    finally:
        shutil.rmtree(state, ignore_errors=True)


def test_an_export_is_imported_through_nginx(cluster):
    """POST /v1/sessions/import creates a session "on any replica" (README,
    Sessions): it names no session, so nginx must balance it as it does a
    create, not take "import" for an id that no replica's prefix matches
    (404 session_not_found, the import never reaching a replica)."""
    ng = cluster.nginx
    sid, _ = create_session(ng)
    kv = {"k": [[1, 0], [0, 1]], "v": [[1, 2], [3, 4]]}
    assert ng.request("POST", f"/v1/sessions/{sid}/kv", kv).status == 200
    exp = ng.request("GET", f"/v1/sessions/{sid}/export")
    assert exp.status == 200, exp
    r = ng.request("POST", "/v1/sessions/import", exp.body,
                   {"Content-Type": "application/octet-stream"})
    assert r.status == 201, r
    new = r.json()["id"]
    assert new != sid and new.split(".")[0] in cluster.reps, new
    # the last address tried (a replica an earlier test killed may come first)
    assert ng.upstream(r).split(",")[-1].strip() == cluster.addr(new.split(".")[0])
    got = ng.request("GET", f"/v1/sessions/{new}")
    assert got.status == 200 and got.json()["length"] == 2, got


def _seconds(text, directive):
    m = re.search(rf"^\s*{directive}\s+(\d+)s;", text, re.M)
    assert m, f"{directive} not found in seconds"
    return int(m.group(1))


def test_nginx_waits_longer_than_a_replica_s_deadline():
    """attnd answers a request past --request-timeout itself (503
    deadline_exceeded, a session left as it was). nginx's read timeout must
    run out later, with room for the pass to reach its next piece and the
    answer to leave: with both at 60 s, nginx's timer (started as it sent
    the request, before the replica had the body) ran out first, and the
    client got 503 replica_unavailable, "sessions it holds are unavailable",
    from a replica that was fine (seen with both at 1 s on 16384 x 16384
    keys: replica_unavailable; nginx at 2 s: deadline_exceeded)."""
    with open(CONF) as f:
        read = _seconds(f.read(), "proxy_read_timeout")
    out = subprocess.run([os.environ.get("ATTND_BIN", os.path.join(ROOT, "build", "attnd")),
                          "--help"], capture_output=True, text=True).stdout
    deadlines = [int(re.search(r"\[ATTND_REQUEST_TIMEOUT; default: (\d+)\]", out).group(1))]
    with open(os.path.join(ROOT, "docker", "compose.yml")) as f:
        for svc in yaml.safe_load(f)["services"].values():
            v = (svc.get("environment") or {}).get("ATTND_REQUEST_TIMEOUT")
            if v is not None:
                deadlines.append(int(v))
    with open(os.path.join(ROOT, "docker", "k8s.yaml")) as f:
        for doc in yaml.safe_load_all(f):
            if doc and doc.get("kind") == "StatefulSet":
                for c in doc["spec"]["template"]["spec"]["containers"]:
                    for e in c.get("env", []):
                        if e["name"] == "ATTND_REQUEST_TIMEOUT":
                            deadlines.append(int(e["value"]))
    assert read >= max(deadlines) + 5, (read, deadlines)


def test_a_client_s_request_id_reaches_the_replica_and_comes_back(cluster):
    """attnd takes "a client's or proxy's X-Request-Id" and every answer
    carries it (README, Operations). nginx set X-Request-Id to its own
    $request_id whatever the client sent, so a caller that traces its
    requests by the id it sends got another id back, and the replica's log
    line held nginx's instead of the caller's. A usable client id (1 to 64
    printable ASCII characters without spaces) now goes through; without
    one, or with one attnd would not take, nginx's $request_id is sent."""
    ng = cluster.nginx
    for method, path, body in (("POST", "/v1/attention", ATT), ("GET", "/v1/info", None),
                               ("POST", "/v1/sessions", {"d_k": 2, "d_v": 2})):
        r = ng.request(method, path, body, {"X-Request-Id": "client-trace-42"})
        assert r.status in (200, 201), r
        assert r.headers.get("x-request-id") == "client-trace-42", (path, r.headers)
        # the access log's id is the one the replica answered with; r2 was
        # stopped by an earlier test, so a stateless request nginx sent there
        # first moved on, and the line lists every replica it tried
        tried = [a.strip() for a in ng.upstream(r).split(",")]
        assert set(tried) <= {cluster.addr(rid) for rid in cluster.reps}, tried
        assert tried[-1] != cluster.addr("r2"), tried
    sid = r.json()["id"]
    r = ng.request("GET", f"/v1/sessions/{sid}", None, {"X-Request-Id": "s" * 64})
    assert r.status == 200 and r.headers.get("x-request-id") == "s" * 64, r
    # without one, or with one attnd would replace, nginx's own (32 hex digits)
    for hdr in ({}, {"X-Request-Id": "has space"}, {"X-Request-Id": "x" * 65},
                {"X-Request-Id": "caf\u00e9".encode().decode("latin-1")}):
        r = ng.request("GET", "/v1/info", None, hdr)
        assert r.status == 200 and re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"]), (hdr, r)
        ng.upstream(r)


def test_nginx_s_own_errors_take_the_v2_shape_under_v2(cluster):
    """Under /v2 attnd answers errors in that protocol's shape,
    {"error":"message [code]"} (README, Errors). nginx's own 413 for a body
    past client_max_body_size answered /v2 in /v1's error object, which an
    OIP v2 client does not read; and its 503 replica_unavailable under /v2
    left the code out of the text."""
    ng = cluster.nginx
    m = re.search(r"^\s*client_max_body_size\s+(\d+)m;", open(CONF).read(), re.M)
    big = b'{"inputs":[]' + b" " * (int(m.group(1)) * 1024 * 1024) + b"}"
    r = ng.request("POST", "/v2/models/attention/infer", big, {"Content-Type": "application/json"})
    assert r.status == 413 and r.headers["content-type"] == "application/json", r
    err = r.json()["error"]
    assert isinstance(err, str) and err.endswith(" [body_too_large]"), err
    r = ng.request("POST", "/v1/attention", big, {"Content-Type": "application/json"})
    assert r.status == 413 and r.json()["error"]["code"] == "body_too_large", r



def test_a_request_past_its_deadline_is_not_run_again_elsewhere():
    """nginx passes a stateless request that got a 502 or 503 on to the next
    replica. A request past its deadline answered 503 deadline_exceeded, so
    nginx ran it again on each other replica (three times the work, and the
    client waited for all three) to answer the same in the end. It is 504
    now, which nginx passes to the client from the first replica. (A
    cluster of its own: the module's has a replica killed by now.)"""
    need_nginx()
    n, d = 8192, 64                     # ~0.2-0.9 s of compute: far past 1 ms
    rnd = random.Random(7)

    def tensor():
        raw = struct.pack("<%df" % (n * d), *(rnd.uniform(-1, 1) for _ in range(n * d)))
        return {"shape": [n, d], "dtype": "float32", "data": base64.b64encode(raw).decode()}

    def stopped(cluster):
        total = 0
        for rep in cluster.reps.values():
            text = rep.get("/metrics").body.decode()
            total += int(re.search(r"^attnd_deadline_exceeded_total (\d+)$", text, re.M).group(1))
        return total

    body = {"q": tensor(), "k": tensor(), "v": tensor(), "encoding": "base64",
            "return": ["output"], "timeout_ms": 1}
    with Cluster(compose_values()) as cluster:
        for i in (1, 2, 3):
            cluster.start(f"r{i}")
        cluster.nginx.start()
        r = cluster.nginx.request("POST", "/v1/attention", body)
        assert r.status == 504 and r.json()["error"]["code"] == "deadline_exceeded", r
        tried = cluster.nginx.upstream(r)
        assert "," not in tried and tried in {cluster.addr(rid) for rid in cluster.reps}, tried
        assert stopped(cluster) == 1

"""tests/e2e/test_e2e_k8s_nginx.py — the Kubernetes deployment of docker/k8s.yaml.

- The manifests pass the Kubernetes API schemas (npm kubernetes-models,
  run by tests/k8s/validate.mjs) and the deployment's own rules (probes,
  a headless Service for the StatefulSet, a volume claim at the state dir,
  disruption budgets, every nginx placeholder set (the host prefix empty),
  nginx's id pattern matching the StatefulSet's pod names and nothing else,
  every pod within the "restricted" Pod Security Standard, a NetworkPolicy
  admitting only nginx to the attnd pods); a broken manifest fails the same
  validator.
- The nginx ConfigMap is docker/nginx.conf byte for byte.
- What the StatefulSet gives, natively: the same nginx configuration with
  the Deployment's values (on loopback addresses, the pods' DNS names served
  by tests/e2e/dns_stub.py) under Debian's nginx in front of three attnd
  processes with journals (--state-dir each, the pod names as replica ids);
  one is killed with SIGKILL and restarted with its state dir at another
  address (a pod that keeps its name and volume and gets a new IP); its
  sessions answer again through nginx with identical outputs, while the
  other two never stopped and answered the same throughout.
- Scaling past three: a fourth pod (attnd-3) takes creates through the pool
  and its sessions are routed to it; an id of a pod that does not exist
  answers 503, and no id makes nginx look up a name outside the headless
  Service's pods.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile

import pytest
import yaml

from attnd_proc import E2E_TLS
from test_e2e_scaleout import HOSTILE, PLACEHOLDERS, Cluster, create_session, need_nginx, until

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K8S = os.path.join(ROOT, "tests", "k8s")


def _validate(*args):
    if os.environ.get("ATTND_BROWSER") == "0":      # make BROWSER=0: no Node.js
        pytest.skip("ATTND_BROWSER=0: the Node.js validator is not installed")
    if not os.path.isdir(os.path.join(K8S, "node_modules", "kubernetes-models")):
        pytest.fail("tests/k8s/node_modules missing: run `make deps-test` (npm ci)")
    return subprocess.run(["node", os.path.join(K8S, "validate.mjs"), *args],
                          capture_output=True, text=True, timeout=120)


def test_manifests_pass_the_kubernetes_schemas():
    r = _validate()
    print(r.stdout.strip().splitlines()[-1])
    assert r.returncode == 0 and r.stdout.strip().endswith(", 0 failed"), r.stdout + r.stderr


def _manifest():
    with open(os.path.join(ROOT, "docker", "k8s.yaml")) as f:
        return f.read()


def _validate_text(tmp_path, text):
    """The validator run on a changed manifest; it must fail."""
    path = tmp_path / "changed.yaml"
    path.write_text(text)
    r = _validate(str(path))
    assert r.returncode == 1, r.stdout
    return r


def test_a_broken_manifest_fails_the_validator(tmp_path):
    text = _manifest()
    bad = text.replace("containerPort: 8080", 'containerPort: "8080"', 1) \
              .replace("clusterIP: None", "clusterIP: 10.0.0.1", 1)
    assert bad != text
    r = _validate_text(tmp_path, bad)
    assert "containerPort must be integer" in r.stdout, r.stdout
    assert "not a headless Service" in r.stdout, r.stdout


def test_an_unhardened_or_open_manifest_fails_the_validator(tmp_path):
    bad = _manifest().replace("readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false") \
              .replace("allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true") \
              .replace("- podSelector:\n            matchLabels: { app.kubernetes.io/name: attnd-nginx }",
                       "- podSelector:\n            matchLabels: { app.kubernetes.io/name: other }")
    assert bad.count("readOnlyRootFilesystem: false") == 2 and "name: other" in bad
    r = _validate_text(tmp_path, bad)
    for who in ("attnd/attnd", "attnd-nginx/nginx"):
        assert f"{who}: restricted profile: readOnlyRootFilesystem" in r.stdout, r.stdout
        assert f"{who}: restricted profile: allowPrivilegeEscalation false" in r.stdout, r.stdout
    assert "NetworkPolicy attnd: admits the nginx pods" in r.stdout, r.stdout


def test_an_id_pattern_wider_than_the_pod_names_fails_the_validator(tmp_path):
    """nginx makes a host from what ATTND_ID_RE matches in a client's URL:
    a pattern that admits more than the pod names would let a client pick
    the host (and a suffix or pool off the headless Service would miss the
    pods)."""
    line = '{ name: ATTND_ID_RE, value: "attnd-(?:0|[1-9][0-9]{0,3})" }'
    bad = _manifest().replace(line, line.replace("attnd-(?:0|[1-9][0-9]{0,3})", "[a-z0-9.:-]+")) \
              .replace('value: ".attnd-headless.attnd.svc', 'value: ".other.attnd.svc')
    assert bad.count("[a-z0-9.:-]+") == 1 and ".other.attnd.svc" in bad
    r = _validate_text(tmp_path, bad)
    assert "ATTND_ID_RE matches nothing but pod names" in r.stdout, r.stdout
    assert "ATTND_HOST_SUFFIX is .attnd-headless.attnd.svc.cluster.local:8080" in r.stdout, r.stdout


def test_a_host_prefix_unset_or_not_empty_fails_the_validator(tmp_path):
    """The pod's name is the id and begins its host name: ATTND_HOST_PREFIX
    is empty, and set, or the image's entrypoint leaves the placeholder in
    nginx's file and nginx does not start."""
    line = '            - { name: ATTND_HOST_PREFIX, value: "" }\n'
    assert _manifest().count(line) == 1
    r = _validate_text(tmp_path, _manifest().replace(line, ""))
    assert "nginx Deployment sets the placeholder ATTND_HOST_PREFIX" in r.stdout, r.stdout
    assert "ATTND_HOST_PREFIX is set and empty" in r.stdout, r.stdout
    r = _validate_text(tmp_path, _manifest().replace(line, line.replace('""', '"attnd-"')))
    assert "ATTND_HOST_PREFIX is set and empty" in r.stdout, r.stdout


def test_configmap_is_docker_nginx_conf():
    r = subprocess.run(["python3", os.path.join(ROOT, "docker", "k8s_configmap.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def k8s_values():
    """The values the nginx Deployment of docker/k8s.yaml gives the
    placeholders."""
    with open(os.path.join(ROOT, "docker", "k8s.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    (dep,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "attnd-nginx"]
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"]: e["value"] for e in env if e["name"] in PLACEHOLDERS}


def test_the_id_pattern_is_the_statefulset_pod_names():
    values = k8s_values()
    pat = re.compile(values["ATTND_ID_RE"])
    for n in range(0, 10000, 7):
        assert pat.fullmatch(f"attnd-{n}"), n
    for bad in ("attnd-01", "attnd-10000", "attnd-", "attnd-x", "attnd-1.x", "other-1",
                "attnd-1:80", "ATTND-1", "attnd--1"):
        assert not pat.fullmatch(bad), bad
    assert values["ATTND_HOST_PREFIX"] == ""        # set: the pod's name begins its host
    assert values["ATTND_HOST_SUFFIX"] == ".attnd-headless.attnd.svc.cluster.local:8080"
    assert values["ATTND_POOL"] == "attnd-headless.attnd.svc.cluster.local:8080"


def _normalise(body):
    doc = json.loads(body)
    doc.get("meta", {}).pop("elapsed_us", None)
    return doc


QUERY = {"q": [[[0.5, -1, 0.25, 2]], [[1, 0, -0.5, 0.75]]], "causal": True}


def _answers(ng, sids):
    """What a client sees of each session through nginx."""
    out = {}
    for sid in sids:
        kv = ng.request("GET", f"/v1/sessions/{sid}/kv")
        att = ng.request("POST", f"/v1/sessions/{sid}/attention", QUERY)
        assert kv.status == 200 and att.status == 200, (sid, kv, att)
        out[sid] = (kv.body, _normalise(att.body))
    return out


@pytest.mark.skipif(E2E_TLS, reason="nginx -> replicas is plain HTTP")
def test_a_killed_replica_comes_back_with_its_sessions_through_nginx():
    need_nginx()
    dirs = {f"attnd-{i}": tempfile.mkdtemp(prefix=f"attnd-k8s-{i}-") for i in range(3)}

    def pod(rid):
        return c.start(rid, "--state-dir", dirs[rid], "--fsync", "always")

    try:
        with Cluster(k8s_values()) as c:
            for rid in dirs:
                pod(rid)
            ng = c.nginx
            ng.start()
            sids = {}
            for n in range(60):
                r = ng.request("POST", "/v1/sessions", {"d_k": 4, "d_v": 4, "heads": 2, "kv_heads": 1,
                                                        "rope": {"base": 10000}})
                assert r.status == 201, r
                sid = r.json()["id"]
                rows = [[(n + i + j) % 7 / 4 - 0.75 for j in range(4)] for i in range(5)]
                assert ng.request("POST", f"/v1/sessions/{sid}/kv",
                                  {"k": rows, "v": rows[::-1]}).status == 200
                sids.setdefault(sid.split(".")[0], []).append(sid)
                if all(len(sids.get(rid, [])) >= 2 for rid in dirs):
                    break
            assert all(len(sids.get(rid, [])) >= 2 for rid in dirs), sids
            everyone = [s for v in sids.values() for s in v]
            before = _answers(ng, everyone)
            pids = {rid: c.reps[rid].proc.pid for rid in dirs}

            old = c.addr("attnd-1")
            c.stop("attnd-1", signal.SIGKILL)            # as an OOM kill; not ready: no DNS name
            for sid in sids["attnd-1"]:
                r = ng.request("GET", f"/v1/sessions/{sid}")
                assert r.status == 503 and r.json()["error"]["code"] == "replica_unavailable", r
            others = sids["attnd-0"] + sids["attnd-2"]
            assert _answers(ng, others) == {s: before[s] for s in others}

            rep = pod("attnd-1")                        # same name and volume, a new address
            assert c.addr("attnd-1") != old
            sid = sids["attnd-1"][0]
            until("the restarted pod's session through nginx",
                  lambda: ng.request("GET", f"/v1/sessions/{sid}").status == 200)
            assert _answers(ng, everyone) == before, "a session answers differently after the restart"
            assert "sessions restored" in rep.logs()
            assert [c.reps[rid].proc.pid for rid in ("attnd-0", "attnd-2")] == \
                [pids["attnd-0"], pids["attnd-2"]], "the other replicas were restarted"
            # and it goes on where it stopped
            r = ng.request("POST", f"/v1/sessions/{sid}/kv",
                           {"k": [[1, 0, 0, 0]], "v": [[0, 1, 0, 0]], "expected_length": 5})
            assert r.status == 200 and r.json()["length"] == 6, r
    finally:
        for d in dirs.values():
            shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(E2E_TLS, reason="nginx -> replicas is plain HTTP")
def test_a_fourth_pod_takes_sessions_and_nginx_routes_them():
    """Review 2.3: the map had one line per pod (attnd-0..2); after `kubectl
    scale --replicas=4` the pool sent creates to attnd-3 as well, and every
    later request for those ids answered 404 session_not_found."""
    need_nginx()
    with Cluster(k8s_values()) as c:
        for i in range(4):
            c.start(f"attnd-{i}")
        ng = c.nginx
        ng.start()
        sids = {}
        for _ in range(200):
            sid, _ = create_session(ng)
            sids.setdefault(sid.split(".")[0], sid)
            if "attnd-3" in sids:
                break
        sid = sids.get("attnd-3")
        assert sid, f"no create reached attnd-3: {sids}"
        for method, path, body in [("POST", f"/v1/sessions/{sid}/kv", {"k": [[1, 0]], "v": [[1, 2]]}),
                                   ("GET", f"/v1/sessions/{sid}", None)]:
            r = ng.request(method, path, body)
            assert r.status == 200, (path, r)
            assert ng.upstream(r) == c.addr("attnd-3")
        assert ng.request("GET", f"/v1/sessions/{sid}").json()["length"] == 1
        # a pod that does not exist (or is not ready) has no name: 503
        r = ng.request("GET", "/v1/sessions/attnd-7.AAAAAAAAAAAAAAAAAAAAAA")
        assert r.status == 503 and r.json()["error"]["code"] == "replica_unavailable", r
        # ids outside the pod names reach no host
        for path in HOSTILE + ["/v1/sessions/attnd-01.AAAA", "/v1/sessions/attnd-10000.AAAA"]:
            r = ng.request("GET", path)
            assert r.status == 404 and r.json()["error"]["code"] == "session_not_found", (path, r)
        allowed = {c.pool_name} | {c.name(f"attnd-{n}") for n in range(10000)}
        assert c.dns.names_asked() <= allowed, c.dns.names_asked() - allowed

"""tests/e2e/test_e2e_k8s_nginx.py — the Kubernetes deployment of docker/k8s.yaml.

- The manifests pass the Kubernetes API schemas (npm kubernetes-models,
  run by tests/k8s/validate.mjs) and the deployment's own rules (probes,
  a headless Service for the StatefulSet, a volume claim at the state dir,
  disruption budgets, every nginx placeholder set, every pod within the
  "restricted" Pod Security Standard, a NetworkPolicy admitting only nginx to
  the attnd pods); a broken manifest fails the same validator.
- The nginx ConfigMap is docker/nginx.conf byte for byte.
- What the StatefulSet gives, natively: the same nginx configuration,
  rendered for loopback, under Debian's nginx in front of three attnd
  processes with journals (--state-dir each, stable replica ids); one is
  killed with SIGKILL and restarted with its state dir on its port (a pod
  that keeps its name and volume); its sessions answer again through nginx
  with identical outputs, while the other two never stopped and answered
  the same throughout.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile

import pytest

from attnd_proc import E2E_TLS, Attnd
from test_e2e_scaleout import NGINX, Nginx, free_port

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


def test_a_broken_manifest_fails_the_validator(tmp_path):
    with open(os.path.join(ROOT, "docker", "k8s.yaml")) as f:
        text = f.read()
    bad = text.replace("containerPort: 8080", 'containerPort: "8080"', 1) \
              .replace("clusterIP: None", "clusterIP: 10.0.0.1", 1)
    assert bad != text
    path = tmp_path / "bad.yaml"
    path.write_text(bad)
    r = _validate(str(path))
    assert r.returncode == 1, r.stdout
    assert "containerPort must be integer" in r.stdout, r.stdout
    assert "not a headless Service" in r.stdout, r.stdout


def test_an_unhardened_or_open_manifest_fails_the_validator(tmp_path):
    with open(os.path.join(ROOT, "docker", "k8s.yaml")) as f:
        text = f.read()
    bad = text.replace("readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false") \
              .replace("allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true") \
              .replace("- podSelector:\n            matchLabels: { app.kubernetes.io/name: attnd-nginx }",
                       "- podSelector:\n            matchLabels: { app.kubernetes.io/name: other }")
    assert bad.count("readOnlyRootFilesystem: false") == 2 and "name: other" in bad
    path = tmp_path / "open.yaml"
    path.write_text(bad)
    r = _validate(str(path))
    assert r.returncode == 1, r.stdout
    for who in ("attnd/attnd", "attnd-nginx/nginx"):
        assert f"{who}: restricted profile: readOnlyRootFilesystem" in r.stdout, r.stdout
        assert f"{who}: restricted profile: allowPrivilegeEscalation false" in r.stdout, r.stdout
    assert "NetworkPolicy attnd: admits the nginx pods" in r.stdout, r.stdout


def test_configmap_is_docker_nginx_conf():
    r = subprocess.run(["python3", os.path.join(ROOT, "docker", "k8s_configmap.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


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
    if not os.path.exists(NGINX):
        pytest.fail("nginx is required (Debian package nginx, in the Makefile's DEPS_TEST)")
    dirs = [tempfile.mkdtemp(prefix=f"attnd-k8s-r{i}-") for i in (1, 2, 3)]
    ports = [free_port() for _ in dirs]

    def replica(i):
        return Attnd("--replica-id", f"r{i + 1}", "--port", str(ports[i]),
                     "--state-dir", dirs[i], "--fsync", "always")

    reps = [replica(i) for i in range(3)]
    ng = Nginx([f"127.0.0.1:{p}" for p in ports])
    try:
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
            if all(len(sids.get(f"r{i}", [])) >= 2 for i in (1, 2, 3)):
                break
        assert all(len(sids.get(f"r{i}", [])) >= 2 for i in (1, 2, 3)), sids
        everyone = [s for v in sids.values() for s in v]
        before = _answers(ng, everyone)
        pids = [r.proc.pid for r in reps]

        reps[1].proc.send_signal(signal.SIGKILL)       # r2, as an OOM kill
        reps[1].proc.wait(timeout=10)
        reps[1].stop()
        for sid in sids["r2"]:
            r = ng.request("GET", f"/v1/sessions/{sid}")
            assert r.status == 503 and r.json()["error"]["code"] == "replica_unavailable", r
        others = sids["r1"] + sids["r3"]
        assert _answers(ng, others) == {s: before[s] for s in others}

        reps[1] = replica(1)                            # same name, port and volume
        assert _answers(ng, everyone) == before, "a session answers differently after the restart"
        assert "sessions restored" in reps[1].logs()
        assert [reps[0].proc.pid, reps[2].proc.pid] == [pids[0], pids[2]], \
            "the other replicas were restarted"
        # and it goes on where it stopped
        sid = sids["r2"][0]
        r = ng.request("POST", f"/v1/sessions/{sid}/kv",
                       {"k": [[1, 0, 0, 0]], "v": [[0, 1, 0, 0]], "expected_length": 5})
        assert r.status == 200 and r.json()["length"] == 6, r
    finally:
        ng.stop()
        for r in reps:
            r.stop()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)

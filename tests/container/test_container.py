"""tests/container/test_container.py — the container image built and run for
real with podman (make test-container; not part of make test).

    test_container.py BUILD

No Docker engine runs on these machines; podman and runc do, with three
settings this sandbox needs, all made here: a containers.conf
(CONTAINERS_CONF, in BUILD/container/) with `default_ulimits = []` and the
runc runtime, and host networking for builds and the single containers
(each listens on its own free loopback port); the compose topology runs on
a podman network of its own, as compose puts it on one. The base image is made
locally (mmdebstrap --variant=minbase bookworm, then podman import as
localhost/debian:bookworm, kept for later runs); docker/Dockerfile keeps its
pinned public base as the default BASE and gets this one by --build-arg.

Checks, each counted:
  image      builds (--format docker: the OCI format drops HEALTHCHECK),
             with the C tests run in its build stage (TESTS=c; the whole
             suite runs natively in CI), and declares HEALTHCHECK and user
             10001
  health     the container's HEALTHCHECK reports healthy
  user       attnd runs as uid 10001, not root
  readonly   the root filesystem is read-only (--read-only), writes fail
  readme     the README's first curl example answers what the README shows
  drain      SIGTERM drains: exit 0, the session saved into the mounted
             volume, and a new container on that volume restores it
  cpus       a container run with --cpus 1 starts one worker (its cgroup's
             CPU quota, not the host's CPU count)
  memory     and, run with --memory 1g, warns that the default bounds
             (1 GiB of KV cache, request bodies, kept blocks) exceed it
             (both skipped, not counted, where podman cannot apply limits)
  template   nginx (a local image on the same base, docker/nginx.Dockerfile)
             given docker/k8s.yaml's values renders docker/nginx.conf with
             the empty ATTND_HOST_PREFIX as nothing, no placeholder left,
             and starts on it
  compose    the compose topology on a podman network: three replicas
             named as docker/compose.yml names them (service name and the
             pool alias) and run with its ids (r1.., not the service
             names), nginx (docker/nginx.Dockerfile) with docker/nginx.conf
             as its template and compose.yml's values, finding the
             network's DNS itself; a session created through nginx lands on
             the replica its id names, and later requests through nginx
             reach it there;
             a replica recreated at a new address is reached there; with a
             replica down, nginx (restarted) starts and only that replica's
             sessions fail, until it is back
  arm64      with ARM64=1: podman build --platform linux/arm64 from an arm64
             base (mmdebstrap --arch arm64) through qemu-user-static binfmt
Everything started here is removed by name on exit. Ends with the line
"N passed, N failed".
"""
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
WORK = os.path.abspath(os.path.join(BUILD, "container"))
TAG = "localhost/attnd:test"
NGINX_TAG = "localhost/attnd-nginx:test"
BASE = "localhost/debian:bookworm"
PREFIX = "attnd-ct-%d" % os.getpid()
passed = failed = 0
started = []            # containers and volumes to remove


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok   %s" % name)
    else:
        failed += 1
        print("FAIL %s %s" % (name, detail))
    return ok


def podman(*args, check_rc=True, timeout=600, quiet=False):
    cmd = ["podman", "--runtime", shutil.which("runc") or "runc", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check_rc and p.returncode != 0:
        if not quiet:
            print("  $ %s\n%s%s" % (" ".join(cmd), p.stdout[-3000:], p.stderr[-3000:]))
        raise RuntimeError("podman %s failed (%d)" % (args[0], p.returncode))
    return p


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def req(port, method, path, body=None, timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        return r.status, data
    finally:
        conn.close()


def wait_http(port, path="/healthz", secs=30):
    end = time.time() + secs
    while time.time() < end:
        try:
            if req(port, "GET", path, timeout=2)[0] == 200:
                return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def run_attnd(name, port, volume=None, replica="", extra=()):
    args = ["run", "-d", "--name", name, "--network", "host", "--read-only",
            "--tmpfs", "/tmp", "-e", "ATTND_PORT=%d" % port, "-e", "ATTND_HOST=127.0.0.1",
            "-e", "ATTND_REPLICA_ID=%s" % replica]
    if volume:
        args += ["-v", "%s:/var/lib/attnd" % volume]
    podman(*args, *extra, TAG)
    started.append(("container", name))
    return name


def ensure_base(arch, tag):
    """A minbase bookworm made here, imported once and kept."""
    if podman("image", "exists", tag, check_rc=False).returncode == 0:
        return
    os.makedirs(WORK, exist_ok=True)
    tar = os.path.join(WORK, "base-%s.tar" % arch)
    t0 = time.time()
    cmd = ["mmdebstrap", "--variant=minbase"] + (["--arch", arch] if arch != "amd64" else []) + \
          ["bookworm", tar]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if p.returncode != 0:               # e.g. "install arch-test for foreign architecture support"
        raise RuntimeError("mmdebstrap failed (%d): %s" % (p.returncode, p.stderr[-1000:]))
    podman("import", *(["--arch", arch] if arch != "amd64" else []), tar, tag)
    os.unlink(tar)
    print("  base %s made in %.0f s" % (tag, time.time() - t0))


def build(tag, dockerfile, *build_args, platform=None, timeout=2400):
    t0 = time.time()
    args = ["build", "--network", "host", "--format", "docker", "-f", dockerfile,
            "--ignorefile", "docker/Dockerfile.dockerignore", "-t", tag]
    if platform:
        args += ["--platform", platform]
    for a in build_args:
        args += ["--build-arg", a]
    podman(*args, ".", timeout=timeout)
    print("  built %s in %.0f s" % (tag, time.time() - t0))


def readme_first_curl():
    """The README's first ```sh block that runs curl, and the JSON block that
    follows it (what the README says it answers)."""
    text = open("README.md").read()
    blocks = re.findall(r"```(\w*)\n(.*?)```", text, re.S)
    for i, (lang, body) in enumerate(blocks):
        if lang == "sh" and body.lstrip().startswith("curl "):
            want = blocks[i + 1][1] if i + 1 < len(blocks) and blocks[i + 1][0] == "json" else None
            return body.strip(), want
    return None, None


def inspect(name, fmt):
    return podman("inspect", "--format", fmt, name).stdout.strip()


def test_single():
    port = free_port()
    img = json.loads(podman("image", "inspect", TAG).stdout)[0]
    cfg = img["Config"]
    hc = img.get("Healthcheck") or img.get("HealthCheck") or cfg.get("Healthcheck") or {}
    check("image: HEALTHCHECK declared (docker format)", "healthz" in " ".join(hc.get("Test") or []),
          str(hc))
    check("image: USER 10001", cfg.get("User", "").startswith("10001"), cfg.get("User"))
    vol = PREFIX + "-state"
    podman("volume", "create", vol)
    started.append(("volume", vol))
    c1 = run_attnd(PREFIX + "-a", port, vol, replica="ct")
    up = wait_http(port)
    check("container answers /healthz", up, podman("logs", c1, check_rc=False).stdout[-2000:])
    if not up:
        return
    hc_rc = podman("healthcheck", "run", c1, check_rc=False).returncode
    status = inspect(c1, "{{.State.Health.Status}}") if hc_rc == 0 else "rc %d" % hc_rc
    if status != "healthy":             # older podman spells the field Healthcheck
        status = inspect(c1, "{{.State.Healthcheck.Status}}") or status
    check("health: HEALTHCHECK reports healthy", status == "healthy", status)
    uid = podman("exec", c1, "sh", "-c", "awk '/^Uid:/ {print $2}' /proc/1/status").stdout.strip()
    check("user: attnd runs as uid 10001", uid == "10001", uid)
    ro = podman("exec", c1, "sh", "-c", "touch /usr/local/bin/x", check_rc=False)
    check("readonly: the root filesystem refuses writes",
          ro.returncode != 0 and inspect(c1, "{{.HostConfig.ReadonlyRootfs}}") == "true",
          ro.stderr)
    cmd, want = readme_first_curl()
    ok = False
    if cmd:
        p = subprocess.run(["sh", "-c", cmd.replace("localhost:8080", "127.0.0.1:%d" % port)],
                           capture_output=True, text=True, timeout=20)
        try:
            got = json.loads(p.stdout)
            got.pop("meta", None)
            ok = want is None or got == json.loads(want)
        except ValueError:
            pass
        check("readme: the first curl example answers as shown", ok, "%r -> %r" % (cmd, p.stdout))
    else:
        check("readme: a curl example in README.md", False)
    # a session, then SIGTERM: drained, saved in the volume, restored by a new container
    st, body = req(port, "POST", "/v1/sessions", {"d_k": 2, "d_v": 2})
    sid = json.loads(body).get("id") if st == 201 else None
    st2 = req(port, "POST", "/v1/sessions/%s/kv" % sid,
               {"k": [[1, 0], [0, 1], [1, 1]], "v": [[1, 2], [3, 4], [5, 6]]})[0] if sid else 0
    check("drain: a session created and appended to", sid is not None and st2 == 200, (st, body))
    t0 = time.time()
    podman("stop", "--time", "30", c1)
    code = inspect(c1, "{{.State.ExitCode}}")
    logs = podman("logs", c1, check_rc=False).stdout
    check("drain: SIGTERM exits 0 after draining", code == "0" and "drain" in logs.lower(),
          "exit %s in %.1f s; %s" % (code, time.time() - t0, logs[-1500:]))
    files = podman("run", "--rm", "--network", "host", "-v", "%s:/s" % vol, "--entrypoint",
                   "sh", TAG, "-c", "ls -A /s").stdout.split()
    check("drain: the state is in the mounted volume",
          any(f.startswith("snapshot.") for f in files), files)
    port2 = free_port()
    c2 = run_attnd(PREFIX + "-b", port2, vol, replica="ct")
    ok = wait_http(port2)
    st, body = req(port2, "GET", "/v1/sessions/%s" % sid) if ok and sid else (0, b"")
    length = json.loads(body).get("length") if st == 200 else None
    check("drain: a new container restores the session", length == 3, (st, body[:300]))
    podman("stop", "--time", "30", c2, check_rc=False)
    test_limits()


def test_limits():
    """A container with --cpus 1 --memory 1g; skipped (not counted) where
    podman cannot apply limits (rootless on cgroup v1, say)."""
    port = free_port()
    name = PREFIX + "-c"
    try:
        c = run_attnd(name, port, extra=("--cpus", "1", "--memory", "1g"))
    except RuntimeError as e:
        podman("rm", "-f", name, check_rc=False)
        print("skip cpus, memory: podman cannot apply --cpus/--memory here (%s)" % e)
        return
    ok = wait_http(port)
    st, body = req(port, "GET", "/v1/info") if ok else (0, b"")
    n = json.loads(body).get("threads", {}).get("workers") if st == 200 else None
    check("cpus: a container run with --cpus 1 starts one worker", n == 1, (st, body[:300]))
    logs = podman("logs", c, check_rc=False).stdout
    check("memory: --memory 1g is warned of (1 GiB of KV cache alone fills it)",
          "memory limit is 1024 MiB" in logs, logs[-1500:])
    podman("stop", "--time", "30", c, check_rc=False)


def compose_file():
    """docker/compose.yml: its nginx placeholder values and its replicas
    (service name -> ATTND_REPLICA_ID, and the pool alias they carry)."""
    import yaml                         # python3-yaml, in DEPS_CONTAINER
    with open("docker/compose.yml") as f:
        doc = yaml.safe_load(f)
    svcs = doc["services"]
    env = {k: str(v) for k, v in svcs["nginx"]["environment"].items()}
    reps = {n: s["environment"]["ATTND_REPLICA_ID"] for n, s in svcs.items() if n.startswith("attnd-")}
    aliases = [a for n in reps for a in svcs[n]["networks"]["default"]["aliases"]]
    return env, reps, aliases


def k8s_nginx_env():
    """docker/k8s.yaml's nginx Deployment: its environment."""
    import yaml
    with open("docker/k8s.yaml") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    (dep,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "attnd-nginx"]
    return {e["name"]: str(e.get("value", "")) for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_nginx_template():
    """The image's entrypoint substitutes a variable that is set and empty
    (k8s.yaml's ATTND_HOST_PREFIX) by nothing, as the official image's does:
    the map line makes the pod's host from the id alone, no ${...} is left,
    and nginx starts on the file."""
    build(NGINX_TAG, "docker/nginx.Dockerfile", "BASE=" + BASE)
    env = dict(k8s_nginx_env(), NGINX_RESOLVER="127.0.0.1")
    if not check("template: k8s.yaml sets ATTND_HOST_PREFIX, empty",
                 env.get("ATTND_HOST_PREFIX", None) == "", env):
        return
    ng = PREFIX + "-template"
    podman("run", "-d", "--name", ng, "--network", "none",
           *[x for k, v in env.items() for x in ("-e", "%s=%s" % (k, v))],
           "-v", "%s:/etc/nginx/templates/default.conf.template:ro" %
           os.path.abspath("docker/nginx.conf"), NGINX_TAG)
    started.append(("container", ng))
    # the pid file is written once nginx runs, so after the template
    up = until(30, lambda: podman("exec", ng, "test", "-s", "/tmp/nginx.pid",
                                  check_rc=False).returncode == 0)
    text = podman("exec", ng, "cat", "/etc/nginx/conf.d/default.conf", check_rc=False).stdout
    line = '"~^/v1/sessions/(%s)\\."  $1%s;' % (env["ATTND_ID_RE"], env["ATTND_HOST_SUFFIX"])
    check("template: an empty ATTND_HOST_PREFIX becomes nothing, nginx starts",
          up and line in text and "${" not in text,
          (up, [x for x in text.splitlines() if "sessions/(" in x or "${" in x],
           podman("logs", ng, check_rc=False).stderr[-1500:]))
    podman("rm", "-f", "-t", "5", ng, check_rc=False)


def until(secs, fn):
    """fn()'s first true answer within secs, or the last answer."""
    end = time.time() + secs
    while True:
        got = fn()
        if got or time.time() > end:
            return got
        time.sleep(0.5)


def test_compose():
    """What docker/compose.yml runs, on a podman network: the replicas
    reached by name (their service names and the pool alias) through the
    network's DNS, nginx (docker/nginx.Dockerfile, Debian's nginx) given
    compose.yml's values and finding that DNS server itself
    (nginx-resolver.envsh). Then review 2.2: a replica recreated at a new
    address is reached there; with a replica down, nginx starts and only
    that replica's sessions fail until it is back."""
    build(NGINX_TAG, "docker/nginx.Dockerfile", "BASE=" + BASE)
    env, reps, aliases = compose_file()
    # nginx makes a replica's host from its id: the service's name
    hosts = {svc: env["ATTND_HOST_PREFIX"] + rid + env["ATTND_HOST_SUFFIX"] for svc, rid in reps.items()}
    check("compose: each replica's id (%s) names its service" % ", ".join(sorted(reps.values())),
          all(h == svc + ":8080" and reps[svc] != svc for svc, h in hosts.items()), hosts)
    net = PREFIX + "-net"
    podman("network", "create", net)
    started.append(("network", net))

    def replica(svc):
        name, vol = "%s-%s" % (PREFIX, svc), "%s-%s-state" % (PREFIX, svc)
        if podman("volume", "exists", vol, check_rc=False).returncode != 0:
            podman("volume", "create", vol)
            started.append(("volume", vol))
        podman("run", "-d", "--name", name, "--network", net, "--network-alias", svc,
               *[x for a in set(aliases) for x in ("--network-alias", a)],
               "--read-only", "--tmpfs", "/tmp", "-v", "%s:/var/lib/attnd" % vol,
               "-e", "ATTND_REPLICA_ID=" + reps[svc], TAG)
        started.append(("container", name))
        return name

    def ip(name):
        return inspect(name, "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}")

    def direct(name, sid):
        """The session as its replica itself answers (inside its container)."""
        p = podman("exec", name, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                   "http://127.0.0.1:8080/v1/sessions/" + sid, check_rc=False)
        return p.stdout.strip()

    names = {svc: replica(svc) for svc in reps}
    port = free_port()
    ng = PREFIX + "-nginx"
    podman("run", "-d", "--name", ng, "--network", net, "-p", "127.0.0.1:%d:8080" % port,
           *[x for k, v in env.items() for x in ("-e", "%s=%s" % (k, v))],
           "-v", "%s:/etc/nginx/templates/default.conf.template:ro" %
           os.path.abspath("docker/nginx.conf"), NGINX_TAG)
    started.append(("container", ng))
    up = wait_http(port, secs=60)
    check("compose: nginx in front of three replicas answers", up,
          podman("logs", ng, check_rc=False).stderr[-2000:])
    if not up:
        return
    owners = {}
    for _ in range(30):
        st, body = req(port, "POST", "/v1/sessions", {"d_k": 2, "d_v": 2})
        if st != 201:
            check("compose: session created through nginx", False, (st, body[:300]))
            return
        sid = json.loads(body)["id"]
        rid = sid.split(".", 1)[0]
        if rid in owners:
            continue
        owners[rid] = sid
        svc = next(n for n, r in reps.items() if r == rid)
        via = req(port, "POST", "/v1/sessions/%s/kv" % sid, {"k": [[1, 0]], "v": [[1, 2]]})[0]
        others = {direct(names[n], sid) for n in reps if n != svc}
        ok = via == 200 and direct(names[svc], sid) == "200" and others == {"404"}
        if not check("compose: session %s routed through nginx to its replica" % sid, ok,
                     (via, others)):
            return
        if len(owners) == len(reps):
            break
    check("compose: sessions spread over every replica", len(owners) == len(reps), owners)
    st = req(port, "POST", "/v1/attention", {"q": [[1, 0]], "k": [[1, 0]], "v": [[1, 2]]})[0]
    check("compose: a stateless request through nginx", st == 200, st)
    if len(owners) != len(reps):
        return

    # a replica's container recreated (compose up -d after an image change)
    svc = sorted(reps)[1]
    sid = owners[reps[svc]]
    old = ip(names[svc])
    podman("stop", "--time", "30", names[svc])
    podman("rm", names[svc])
    replica(svc)
    new = ip(names[svc])
    got = until(30, lambda: req(port, "GET", "/v1/sessions/" + sid)[0] == 200)
    check("compose: a recreated replica (%s, then %s) is reached with its session" % (old, new),
          got, req(port, "GET", "/v1/sessions/" + sid))

    # that replica down when nginx starts
    podman("stop", "--time", "30", names[svc])
    podman("restart", "--time", "10", ng)
    up = wait_http(port, secs=60)
    live = [r for n, r in reps.items() if n != svc]
    ok = up and req(port, "POST", "/v1/attention", {"q": [[1, 0]], "k": [[1, 0]], "v": [[1, 2]]})[0] == 200 \
        and all(req(port, "GET", "/v1/sessions/" + owners[r])[0] == 200 for r in live)
    down = req(port, "GET", "/v1/sessions/" + sid) if up else (0, b"")
    check("compose: nginx starts with a replica down; only its sessions fail",
          ok and down[0] == 503 and b"replica_unavailable" in down[1],
          (up, down, podman("logs", ng, check_rc=False).stderr[-1500:]))
    podman("start", names[svc])
    got = until(30, lambda: req(port, "GET", "/v1/sessions/" + sid)[0] == 200)
    check("compose: the replica back, its sessions answer through nginx", got)


def test_arm64():
    binfmt = "/proc/sys/fs/binfmt_misc/qemu-aarch64"
    if not os.path.exists(binfmt):
        subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", "/proc/sys/fs/binfmt_misc"],
                       capture_output=True)
        subprocess.run(["update-binfmts", "--enable", "qemu-aarch64"], capture_output=True)
    if not check("arm64: qemu-aarch64 registered through binfmt", os.path.exists(binfmt)):
        return
    ensure_base("arm64", BASE + "-arm64")
    build(TAG + "-arm64", "docker/Dockerfile", "BASE=%s-arm64" % BASE, "TESTS=%s" %
          os.environ.get("ARM64_TESTS", "none"), platform="linux/arm64", timeout=5400)
    arch = json.loads(podman("image", "inspect", TAG + "-arm64").stdout)[0].get("Architecture")
    out = podman("run", "--rm", "--network", "host", TAG + "-arm64", "--version",
                 check_rc=False)
    check("arm64: the image is linux/arm64 and attnd runs in it", arch == "arm64" and
          out.returncode == 0, (arch, out.stdout, out.stderr[-500:]))


def cleanup():
    for kind, name in reversed(started):
        if kind == "container":
            podman("rm", "-f", "-t", "5", name, check_rc=False, quiet=True)
        elif kind == "network":
            podman("network", "rm", "-f", name, check_rc=False, quiet=True)
        else:
            podman("volume", "rm", "-f", name, check_rc=False, quiet=True)


def main():
    sys.stdout.reconfigure(line_buffering=True)
    os.makedirs(WORK, exist_ok=True)
    conf = os.path.join(WORK, "containers.conf")
    with open(conf, "w") as f:
        f.write("[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = \"runc\"\n")
    os.environ["CONTAINERS_CONF"] = conf
    t0 = time.time()
    try:
        ensure_base("amd64", BASE)
        if os.environ.get("CT_REUSE") != "1":   # CT_REUSE=1: the image built last time
            build(TAG, "docker/Dockerfile", "BASE=" + BASE, "TESTS=c")
        check("image: builds from the local base", True)
        test_single()
        test_nginx_template()
        test_compose()
        if os.environ.get("ARM64") == "1":
            test_arm64()
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        check("container suite ran to its end", False, repr(e))
    finally:
        cleanup()
    print("  test-container took %.0f s" % (time.time() - t0))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""tests/e2e/test_e2e_docker.py — the container image, checked without Docker.

These machines have no Docker engine, so the image is checked in two ways:
statically (docker/Dockerfile is parsed: pinned bases, two stages, a runtime
stage with no toolchain or -dev package, non-root USER, EXPOSE, HEALTHCHECK on
/healthz, STOPSIGNAL SIGTERM, ATTND_* configuration, apt caches cleaned in
their layer, OCI labels with the Makefile's version) and natively: the build
stage's build step runs on a clean clone of HEAD, the runtime stage's
packages are shown to cover every library the binary needs, and the binary is
started with the runtime stage's environment and probed with the very
HEALTHCHECK command, then stopped with the STOPSIGNAL.
"""
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOCKERFILE = os.path.join(ROOT, "docker", "Dockerfile")
BIN = os.path.abspath(os.environ.get("ATTND_BIN", os.path.join(ROOT, "build", "attnd")))


# ---- a small Dockerfile reader --------------------------------------------

def parse_dockerfile(text):
    """[(instruction, args)] with continuation lines joined, comments dropped."""
    out, cur = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not cur and (not line or line.startswith("#")):
            continue
        if cur and line.startswith("#"):
            continue                      # comment inside a continued instruction
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        word, _, args = " ".join(cur.split()).partition(" ")
        out.append((word.upper(), args))
        cur = ""
    return out


def stages(instrs):
    """Global ARGs and the list of stages: {'from','name','instrs'}."""
    global_args, result = {}, []
    for word, args in instrs:
        if word == "FROM":
            parts = args.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            result.append({"from": parts[0], "name": name, "instrs": []})
        elif not result:
            if word == "ARG":
                k, _, v = args.partition("=")
                global_args[k.strip()] = v.strip()
        else:
            result[-1]["instrs"].append((word, args))
    return global_args, result


def expand(s, env):
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), m.group(0)), s)


def env_of(stage):
    """ENV key=value pairs of a stage (ENV a=1 b=2 form)."""
    env = {}
    for word, args in stage["instrs"]:
        if word == "ENV":
            for tok in shlex.split(args):
                k, eq, v = tok.partition("=")
                assert eq, f"ENV without '=' is ambiguous: {args}"
                env[k] = v
    return env


def apt_packages(stage):
    """Packages named by `apt-get install` in the stage's RUN lines."""
    pkgs = []
    for word, args in stage["instrs"]:
        if word != "RUN":
            continue
        for cmd in re.split(r"&&|;", args):
            toks = cmd.split()
            if len(toks) >= 2 and toks[0] in ("apt-get", "apt") and "install" in toks:
                after = toks[toks.index("install") + 1:]
                pkgs += [t for t in after if not t.startswith("-")]
    return pkgs


@pytest.fixture(scope="module")
def df():
    with open(DOCKERFILE) as f:
        instrs = parse_dockerfile(f.read())
    gargs, st = stages(instrs)
    return {"instrs": instrs, "args": gargs, "stages": st,
            "build": st[0], "runtime": st[-1]}


# ---- static checks ---------------------------------------------------------

def test_parser_reads_continuations_and_comments():
    text = "# c\nFROM a AS b\nRUN x \\\n  # inner\n  && y\nENV A=1 \\\n    B=2\n"
    got = parse_dockerfile(text)
    assert got == [("FROM", "a AS b"), ("RUN", "x && y"), ("ENV", "A=1 B=2")]


def test_multi_stage_on_pinned_bookworm(df):
    assert len(df["stages"]) >= 2, "build and runtime stages expected"
    for st in df["stages"]:
        image = expand(st["from"], df["args"])
        if image in {s["name"] for s in df["stages"]}:
            continue                      # FROM an earlier stage
        name, _, digest = image.partition("@")
        repo, _, tag = name.rpartition(":")
        assert repo == "debian" and tag.startswith("bookworm"), image
        # a dated tag (moves never) and the digest of that tag
        assert re.fullmatch(r"bookworm-\d{8}-slim", tag), f"tag not exact: {image}"
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), f"no digest pin: {image}"


def test_build_stage_builds_and_runs_make_test(df):
    runs = " ".join(a for w, a in df["build"]["instrs"] if w == "RUN")
    assert "libmicrohttpd-dev" in runs and "libjansson-dev" in runs
    assert re.search(r"\bmake\b[^&;]*\ball\b", runs), "build stage must build"
    assert re.search(r"\bmake test\b", runs), "build stage must run the tests"
    # no -march=native baked into a portable image
    assert re.search(r"OPT=-O2\b", runs)


def test_runtime_stage_is_minimal_and_unprivileged(df):
    rt = df["runtime"]
    pkgs = apt_packages(rt)
    assert pkgs, "runtime installs its libraries"
    for p in pkgs:
        assert not p.endswith("-dev"), p
        assert p not in {"gcc", "make", "pkg-config", "libc6-dev", "git", "python3"}, p
    for lib in ("libmicrohttpd12", "libjansson4", "libopenblas0-pthread", "libuv1"):
        assert lib in pkgs
    users = [a for w, a in rt["instrs"] if w == "USER"]
    assert users, "runtime stage needs a USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), users[-1]
    copies = [a for w, a in rt["instrs"] if w == "COPY"]
    assert any("--from=" in c and "attnd" in c for c in copies)


def test_runtime_metadata(df):
    rt = df["runtime"]
    words = {w for w, _ in rt["instrs"]}
    assert {"EXPOSE", "HEALTHCHECK", "STOPSIGNAL", "ENTRYPOINT"} <= words
    assert [a for w, a in rt["instrs"] if w == "EXPOSE"] == ["8080"]
    assert [a for w, a in rt["instrs"] if w == "STOPSIGNAL"] == ["SIGTERM"]
    hc = [a for w, a in rt["instrs"] if w == "HEALTHCHECK"][0]
    assert "/healthz" in hc and " CMD " in f" {hc} "
    env = env_of(rt)
    assert env.get("ATTND_HOST") == "0.0.0.0"
    assert env.get("ATTND_PORT") == "8080"
    assert env.get("ATTND_LOG_FORMAT") == "json"


def test_runtime_layers_and_labels(df):
    """apt leaves no cache or lists in its layer, DEBIAN_FRONTEND is a build
    ARG (not in the running container's environment), and the OCI labels
    carry the Makefile's version."""
    for st in df["stages"]:
        assert "DEBIAN_FRONTEND" not in env_of(st), "DEBIAN_FRONTEND as ENV leaks into the image"
    for word, args in df["runtime"]["instrs"]:
        if word == "RUN" and "apt-get install" in args:
            assert "apt-get clean" in args and "/var/lib/apt/lists/*" in args \
                and "/var/cache/apt/*" in args, args
    stage_args = dict(a.partition("=")[::2] for w, a in df["runtime"]["instrs"] if w == "ARG")
    with open(os.path.join(ROOT, "Makefile")) as f:
        version = re.search(r"^VERSION\s*:?=\s*(\S+)", f.read(), re.M).group(1)
    assert stage_args.get("VERSION") == version, "ARG VERSION must default to the Makefile's"
    labels = {}
    for word, args in df["runtime"]["instrs"]:
        if word == "LABEL":
            for tok in shlex.split(args):
                k, _, v = tok.partition("=")
                labels[k] = v
    assert labels.get("org.opencontainers.image.title") == "attnd"
    assert labels.get("org.opencontainers.image.description")
    assert labels.get("org.opencontainers.image.version") == "${VERSION}"


def test_dockerignore_keeps_outputs_out():
    with open(os.path.join(ROOT, "docker", "Dockerfile.dockerignore")) as f:
        lines = {l.strip() for l in f if l.strip() and not l.startswith("#")}
    assert "build/" in lines


def dockerignore_regex(pattern):
    """A .dockerignore line as Docker (moby/patternmatcher) reads it: anchored
    at the context's root, '**' any number of directories, '*' and '?'
    within one name."""
    pat = pattern.strip().strip("/")
    out, i = "", 0
    while i < len(pat):
        if pat.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pat.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pat[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pat[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pat[i]), i + 1
    return re.compile(out + r"\Z")


def test_dockerignore_keeps_every_node_modules_out():
    """The Makefile's deps-test installs node_modules in tests/browser and
    tests/k8s (26 MB); docker/Dockerfile says the context leaves them out.
    A 'node_modules/' line matches the context's root only, so
    tests/k8s/node_modules went into every image build."""
    with open(os.path.join(ROOT, "docker", "Dockerfile.dockerignore")) as f:
        pats = [dockerignore_regex(l) for l in f if l.strip() and not l.startswith("#")]
    with open(os.path.join(ROOT, "Makefile")) as f:
        dirs = re.search(r"for d in ([^;]+); do", f.read()).group(1).split()
    assert "tests/k8s" in dirs and "tests/browser" in dirs, dirs
    for d in dirs + [""]:
        path = (d + "/" if d else "") + "node_modules/x/package.json"
        parts = path.split("/")
        left_out = any(p.match("/".join(parts[:n]))
                       for p in pats for n in range(1, len(parts) + 1))
        assert left_out, f"{path} is in the build context"
    # the reader reads Docker's rules: a name without '**' is the root's only
    assert not dockerignore_regex("node_modules/").match("tests/k8s/node_modules")
    assert dockerignore_regex("**/node_modules/").match("node_modules")


# ---- native checks ---------------------------------------------------------

def needed_libs(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def owner_package(libname):
    ldd = subprocess.run(["ldd", BIN], capture_output=True, text=True, check=True).stdout
    m = re.search(re.escape(libname) + r" => (\S+)", ldd)
    assert m, f"{libname} not resolved by ldd"
    real = os.path.realpath(m.group(1))
    out = subprocess.run(["dpkg", "-S", real], capture_output=True, text=True)
    if out.returncode != 0:               # merged /usr: dpkg knows the /lib path
        alt = re.sub(r"^/usr/lib/", "/lib/", real)
        out = subprocess.run(["dpkg", "-S", alt], capture_output=True, text=True, check=True)
    return out.stdout.split(":")[0]


def base_packages():
    """What every Debian image has: the Essential packages, the required
    ones, and what the Essential ones depend on (libc6, ...)."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Essential}\t${Priority}\t"
                          "${Pre-Depends}, ${Depends}\n"], capture_output=True, text=True,
                         check=True).stdout
    base = set()
    for line in out.splitlines():
        name, essential, prio, deps = (line.split("\t") + ["", "", ""])[:4]
        if essential == "yes" or prio == "required":
            base.add(name)
            base.update(re.findall(r"(?:^|[,|]\s*)([a-z0-9][a-z0-9.+-]+)", deps))
    return base


@pytest.mark.skipif(not shutil.which("dpkg"), reason="needs a Debian host to map libraries to packages")
def test_runtime_packages_cover_the_binary(df):
    if not os.path.exists(BIN):
        pytest.fail(f"{BIN} not built")
    pkgs = set(apt_packages(df["runtime"]))
    base = base_packages()
    assert "libc6" in base
    libs = needed_libs(BIN)
    assert any(l.startswith("libmicrohttpd") for l in libs), libs
    for lib in libs:
        if re.match(r"lib(asan|ubsan|tsan|lsan)\.so", lib):
            continue  # a sanitizer build (make asan/tsan) is not what ships
        pkg = owner_package(lib)
        # either installed by the runtime stage or part of the base image
        assert pkg in pkgs or pkg in base, f"{lib} from {pkg} missing at runtime"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def clean_build(df):
    """The build stage's build step, run natively on a clean clone of HEAD."""
    if not os.path.isdir(os.path.join(ROOT, ".git")) or not shutil.which("git"):
        pytest.skip("not a git checkout (e.g. inside the image build): nothing to clone")
    tmp = tempfile.mkdtemp(prefix="attnd-docker-")
    src = os.path.join(tmp, "src")
    subprocess.run(["git", "clone", "-q", "--no-local", "--depth", "1", "file://" + ROOT, src],
                   check=True, timeout=120)
    build = df["build"]
    # the outer make's variables (BUILD=build/asan, SANFLAGS...) must not leak
    # into the clean build, which is meant to be what the image runs
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "BUILD", "SANFLAGS", "OPT")}
    env.update(env_of(build))
    for w, a in build["instrs"]:
        if w == "ARG" and "=" in a:
            k, _, v = a.partition("=")
            env.setdefault(k, v)
    steps = [a for w, a in build["instrs"] if w == "RUN"
             and re.match(r"make\b", a) and not re.search(r"\bmake test\b", a)]
    assert steps, "no build step found in the build stage"
    for cmd in steps:
        r = subprocess.run(["sh", "-ec", cmd], cwd=src, env=env, capture_output=True,
                           text=True, timeout=480)
        assert r.returncode == 0, f"`{cmd}` failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    yield os.path.join(src, "build", "attnd")
    shutil.rmtree(tmp, ignore_errors=True)


def test_clean_checkout_builds_and_reports_version(clean_build):
    r = subprocess.run([clean_build, "--version"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0
    assert re.search(r"\d+\.\d+\.\d+", r.stdout + r.stderr)


def test_runtime_env_healthcheck_and_stopsignal(df, clean_build):
    rt = df["runtime"]
    port = free_port()
    state = tempfile.mkdtemp(prefix="attnd-state-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTND_")}
    env.update(env_of(rt))
    # Same configuration surface; only the address differs: tests bind
    # loopback, not every interface.
    env.update(ATTND_HOST="127.0.0.1", ATTND_PORT=str(port), ATTND_STATE_DIR=state)
    proc = subprocess.Popen([clean_build], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        hc = [a for w, a in rt["instrs"] if w == "HEALTHCHECK"][0]
        cmd = hc.split(" CMD ", 1)[1] if " CMD " in hc else hc.split("CMD ", 1)[1]
        deadline, rc = time.time() + 10, None
        while time.time() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode(errors="replace")
            rc = subprocess.run(["sh", "-c", cmd], env=env, capture_output=True).returncode
            if rc == 0:
                break
            time.sleep(0.1)
        assert rc == 0, "HEALTHCHECK command never succeeded"
        # a failing probe must fail: the same command against a closed port
        bad = dict(env, ATTND_PORT=str(free_port()))
        assert subprocess.run(["sh", "-c", cmd], env=bad, capture_output=True).returncode != 0
        stop = [a for w, a in rt["instrs"] if w == "STOPSIGNAL"][0]
        proc.send_signal(getattr(signal, stop))
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err.decode(errors="replace")
        # ATTND_LOG_FORMAT=json: every log line is one JSON object
        lines = [l for l in (out + err).decode().splitlines() if l.strip()]
        assert lines, "no log lines"
        for line in lines:
            assert isinstance(json.loads(line), dict), line
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(state, ignore_errors=True)


# ---- compose and Kubernetes files -----------------------------------------

def load_yaml(name):
    yaml = pytest.importorskip("yaml", reason="python3-yaml (Makefile DEPS_TEST)")
    with open(os.path.join(ROOT, "docker", name)) as f:
        return list(yaml.safe_load_all(f))


def test_compose_three_replicas_behind_nginx():
    (doc,) = load_yaml("compose.yml")
    svcs = doc["services"]
    reps = {n: s for n, s in svcs.items() if n.startswith("attnd-")}
    assert len(reps) == 3
    ng = svcs["nginx"]
    env = ng["environment"]
    pool_name = env["ATTND_POOL"].rsplit(":", 1)[0]
    # the ids compose.yml has always given its replicas: their volumes hold
    # sessions under them, which another id would leave unreachable (404)
    assert sorted(s["environment"]["ATTND_REPLICA_ID"] for s in reps.values()) == ["r1", "r2", "r3"]
    for name, s in reps.items():
        # the host nginx makes from its id (prefix, id, suffix) is its
        # service name; every replica also answers to the pool's name
        rid = s["environment"]["ATTND_REPLICA_ID"]
        assert re.fullmatch(env["ATTND_ID_RE"], rid) and not re.fullmatch(env["ATTND_ID_RE"], name)
        assert env["ATTND_HOST_PREFIX"] + rid + env["ATTND_HOST_SUFFIX"] == name + ":8080", (name, rid)
        assert pool_name in s["networks"]["default"]["aliases"]
        assert s["environment"]["ATTND_HOST"] == "0.0.0.0"
        assert s["build"]["dockerfile"] == "docker/Dockerfile"
        assert "ports" not in s, "only nginx publishes a port"
    assert re.fullmatch(r"nginx:\d+\.\d+\.\d+(-\w+)?", ng["image"]), ng["image"]
    # every placeholder of nginx.conf is set; the resolver is found in the
    # container by the script mounted where the image's entrypoint sources it
    with open(os.path.join(ROOT, "docker", "nginx.conf")) as f:
        names = set(re.findall(r"\$\{(\w+)\}", f.read()))
    assert names - {"NGINX_RESOLVER"} <= set(env) and "NGINX_RESOLVER" not in env
    assert "./nginx-resolver.envsh:/docker-entrypoint.d/15-attnd-resolver.envsh:ro" in ng["volumes"]
    assert any("nginx.conf:/etc/nginx/templates/" in v for v in ng["volumes"])
    # nginx starts whether or not every replica is up
    assert all(d["condition"] == "service_started" for d in ng["depends_on"].values())


def test_nginx_resolver_script_takes_the_first_nameserver(tmp_path):
    """Under podman, a container's resolv.conf lists the network's DNS
    server, then the host's, which do not know the replicas; an IPv6 server
    needs brackets in `resolver`. A value given is kept."""
    script = os.path.join(ROOT, "docker", "nginx-resolver.envsh")
    assert os.access(script, os.X_OK), "the official image sources only executable .envsh files"
    text = open(script).read().replace("/etc/resolv.conf", str(tmp_path / "resolv.conf"))
    (tmp_path / "s.envsh").write_text(text)
    for conf, given, want in [("search dns.podman\nnameserver 10.89.0.1\nnameserver 10.255.255.53\n",
                               None, "10.89.0.1"),
                              ("nameserver 127.0.0.11\noptions ndots:0\n", None, "127.0.0.11"),
                              ("nameserver fd00::a\n", None, "[fd00::a]"),
                              ("nameserver 10.96.0.10\n", "kube-dns.kube-system", "kube-dns.kube-system")]:
        (tmp_path / "resolv.conf").write_text(conf)
        env = {"PATH": os.environ["PATH"]}
        if given:
            env["NGINX_RESOLVER"] = given
        r = subprocess.run(["sh", "-c", f'. "{tmp_path}/s.envsh"; printf %s "$NGINX_RESOLVER"'],
                           env=env, capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout == want, (conf, r)


def test_k8s_statefulset_probes_and_service():
    # the schemas and the routing: tests/e2e/test_e2e_k8s_nginx.py
    docs = {(d["kind"], d["metadata"]["name"]): d for d in load_yaml("k8s.yaml")}
    dep, svc = docs[("StatefulSet", "attnd")], docs[("Service", "attnd-headless")]
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["resources"]["limits"]["memory"] and c["resources"]["requests"]["cpu"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    env = {e["name"]: e for e in c["env"]}
    assert env["ATTND_HOST"]["value"] == "0.0.0.0"
    assert env["ATTND_REPLICA_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert pod["terminationGracePeriodSeconds"] > int(env["ATTND_DRAIN_TIMEOUT"]["value"])


def _healthcheck_cmd(df):
    hc = [a for w, a in df["runtime"]["instrs"] if w == "HEALTHCHECK"][0]
    return hc.split(" CMD ", 1)[1]


def test_healthcheck_follows_tls_set_in_the_environment(df):
    """Review net 4: with ATTND_TLS_CERT/ATTND_TLS_KEY the port speaks only
    TLS, and a probe of http:// left the container unhealthy for good."""
    from attnd_proc import E2E_TLS, Attnd, make_ca, make_cert
    cmd = _healthcheck_cmd(df)
    d = tempfile.mkdtemp(prefix="attnd-hc-")
    try:
        cert, key = make_cert(d, "srv", make_ca(d, "ca"), "attnd.example")
        os.chmod(key, 0o600)
        base = {k: v for k, v in os.environ.items() if not k.startswith("ATTND_")}
        with Attnd("--tls-cert", cert, "--tls-key", key) as a:
            tls_env = dict(base, ATTND_PORT=str(a.port), ATTND_TLS_CERT=cert, ATTND_TLS_KEY=key)
            r = subprocess.run(["sh", "-c", cmd], env=tls_env, capture_output=True, text=True)
            assert r.returncode == 0, (cmd, r.stderr)
            # the same port without the variables: plain http fails, as it must
            plain_env = dict(base, ATTND_PORT=str(a.port))
            assert subprocess.run(["sh", "-c", cmd], env=plain_env,
                                  capture_output=True).returncode != 0
        if not E2E_TLS:
            with Attnd() as a:
                plain_env = dict(base, ATTND_PORT=str(a.port))
                assert subprocess.run(["sh", "-c", cmd], env=plain_env,
                                      capture_output=True).returncode == 0
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ---- scale-out files: nothing per-address may cut the proxy off ------------

def _replica_env_compose():
    (doc,) = load_yaml("compose.yml")
    return [s["environment"] for n, s in doc["services"].items() if n.startswith("attnd-")]


def _replica_env_k8s():
    docs = {(d["kind"], d["metadata"]["name"]): d for d in load_yaml("k8s.yaml")}
    (c,) = docs[("StatefulSet", "attnd")]["spec"]["template"]["spec"]["containers"]
    return [{e["name"]: e.get("value") for e in c["env"]}]


@pytest.mark.parametrize("envs", [_replica_env_compose, _replica_env_k8s])
def test_replicas_let_the_proxy_use_every_connection(envs):
    """Review net 1: every connection comes from nginx; attnd's default
    per-address cap (256, below --max-connections 1000) refused nginx's
    connections under a few hundred clients and nginx took all replicas
    out of rotation."""
    help_text = subprocess.run([BIN, "--help"], capture_output=True, text=True).stdout
    default = {f: int(re.search(r"--%s .*\n.*default: (\d+)" % f, help_text).group(1))
               for f in ("max-connections", "max-connections-per-ip")}
    for env in envs():
        total = int(env.get("ATTND_MAX_CONNECTIONS", default["max-connections"]))
        per_ip = int(env.get("ATTND_MAX_CONNECTIONS_PER_IP", default["max-connections-per-ip"]))
        assert per_ip >= total, env


def test_nginx_looks_every_replica_up_per_request():
    """Review 2.2: upstream blocks resolved the replicas' names when nginx
    started: it did not start while one was down, and kept a recreated
    replica's old address. Every proxy_pass names a variable, looked up
    through `resolver`; the pool still moves a failed attempt on."""
    with open(os.path.join(ROOT, "docker", "nginx.conf")) as f:
        conf = f.read()
    assert not re.search(r"^\s*upstream\s", conf, re.M)
    targets = re.findall(r"^\s*proxy_pass\s+(\S+);", conf, re.M)
    assert targets and all(re.fullmatch(r"http://\$attnd_\w+", t) for t in targets), targets
    assert re.search(r"^\s*resolver \$\{NGINX_RESOLVER\} valid=\d+s", conf, re.M)
    assert re.search(r"^\s*proxy_next_upstream error timeout http_502 http_503 non_idempotent;", conf, re.M)
    assert re.search(r"^\s*proxy_next_upstream_tries [2-9];", conf, re.M)


def test_replica_ids_fit_the_routing_map():
    """Ids are PREFIX + '.' + random, and nginx routes on
    "^/v1/sessions/(ATTND_ID_RE)\\.": every id the files set is of the
    alphabet attnd accepts and a DNS label."""
    for env in _replica_env_compose():
        assert re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", env["ATTND_REPLICA_ID"]), env
    docs = {(d["kind"], d["metadata"]["name"]): d for d in load_yaml("k8s.yaml")}
    name = docs[("StatefulSet", "attnd")]["metadata"]["name"]
    assert re.fullmatch(r"[a-z0-9-]{1,50}", name)  # pods name-0.. are the ids
    with open(os.path.join(ROOT, "docker", "nginx.conf")) as f:
        conf = f.read()
    assert '"~^/v1/sessions/(${ATTND_ID_RE})\\."  ${ATTND_HOST_PREFIX}$1${ATTND_HOST_SUFFIX};' in conf


def _seconds(text):
    m = re.fullmatch(r"(\d+)(s|m)", text)
    assert m, text
    return int(m.group(1)) * (60 if m.group(2) == "m" else 1)


def test_healthcheck_waits_for_the_journal_replay_as_the_startup_probe_does(df):
    """attnd opens its port only once the state directory's sessions are
    read back (seconds to minutes for a large state), so k8s.yaml's
    startupProbe gives that 150 x 2 s. The image's HEALTHCHECK counted
    failures after a 5 s start period: a replica replaying its volume for
    more than about 35 s was marked unhealthy, which fails `docker compose
    up --wait` and has Swarm replace the container mid-replay, again and
    again. Failures inside the start period do not count and the first
    success ends it, so a long one costs a quick start nothing."""
    hc = [a for w, a in df["runtime"]["instrs"] if w == "HEALTHCHECK"][0]
    opts = dict(re.findall(r"--([\w-]+)=(\S+)", hc.split(" CMD ", 1)[0]))
    start = _seconds(opts.get("start-period", "0s"))
    docs = {(d["kind"], d["metadata"]["name"]): d for d in load_yaml("k8s.yaml")}
    (c,) = docs[("StatefulSet", "attnd")]["spec"]["template"]["spec"]["containers"]
    sp = c["startupProbe"]
    assert sp["httpGet"]["path"] == "/healthz"
    assert start >= sp["periodSeconds"] * sp["failureThreshold"], (start, sp)


def _nginx_read_timeout():
    """docker/nginx.conf's proxy_read_timeout, seconds: how long a request
    may be in flight through nginx."""
    with open(os.path.join(ROOT, "docker", "nginx.conf")) as f:
        return int(re.search(r"^\s*proxy_read_timeout\s+(\d+)s;", f.read(), re.M).group(1))


def test_k8s_nginx_pods_finish_the_requests_they_hold_before_they_stop():
    """A rolled or evicted nginx pod gets the image's STOPSIGNAL (SIGQUIT:
    stop accepting, finish the requests in flight), and SIGKILL once
    terminationGracePeriodSeconds has passed. Left at Kubernetes' default
    30 s, a request a replica may compute for 60 s (--request-timeout; nginx
    waits 75 s, proxy_read_timeout) was cut mid-flight by a rolling update of
    nginx: the client got no answer for a session append the replica had
    applied. And without a preStop pause nginx closed its port while the
    Service still sent it new connections, which were refused; the attnd
    pods have that pause for the same reason."""
    docs = {(d["kind"], d["metadata"]["name"]): d for d in load_yaml("k8s.yaml")}
    pod = docs[("Deployment", "attnd-nginx")]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    pause = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
    assert pause and pause[0] == "sleep", c.get("lifecycle")
    assert pod.get("terminationGracePeriodSeconds", 30) > int(pause[1]) + _nginx_read_timeout(), pod


def test_compose_s_nginx_finishes_the_requests_it_holds_before_it_stops():
    """The same for compose: `docker compose up -d` recreating nginx (a new
    image or configuration) sends SIGQUIT and kills it after
    stop_grace_period, 10 s unless set, cutting requests that a replica may
    still compute for up to 60 s."""
    (doc,) = load_yaml("compose.yml")
    grace = _seconds(str(doc["services"]["nginx"].get("stop_grace_period", "10s")))
    assert grace > _nginx_read_timeout(), grace

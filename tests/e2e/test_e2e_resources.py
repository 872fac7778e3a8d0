"""tests/e2e/test_e2e_resources.py — what attnd may use of the machine
(server/resources.c). --workers and --http-threads default to the CPUs it
may use, not to those the machine has:

- under an affinity mask of one CPU (taskset) attnd starts one worker;
- in a cgroup with a CPU quota of half a CPU (docker --cpus 0.5, a
  Kubernetes limit of 500m) it starts one worker too, and says why; the
  cgroup is made here, under cgroup v1's cpu controller or cgroup v2's
  unified hierarchy, whichever this machine lets root write (skipped with
  the reason otherwise);
- an explicit --workers still wins.

And a cgroup memory limit below what attnd may hold at once (KV cache,
request bodies, kept blocks) is warned of at start, naming each part; an
address-space limit (ulimit -v) too small for the compute pool's threads
stops the start with a clear line, where libuv, which makes them at the
first request that needs one, used to abort the serving process.
"""
import os
import resource
import shutil
import time

import pytest

from attnd_proc import Attnd, events, listening


def workers(a):
    return a.get("/v1/info").json()["threads"]["workers"]


def one_cpu():
    """A preexec_fn pinning the child to the first CPU of ours."""
    first = min(os.sched_getaffinity(0))
    return lambda: os.sched_setaffinity(0, {first})


needs_two = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                               reason="this process may use one CPU only")


@needs_two
def test_an_affinity_of_one_cpu_starts_one_worker():
    with Attnd(preexec=one_cpu()) as a:
        assert workers(a) == 1
        assert listening(a)["cpus"] == "1"
        said = [e["msg"] for e in events(a) if e["msg"].startswith("CPUs:")]
        assert len(said) == 1 and "affinity mask 1" in said[0], said
    with Attnd("--workers", "3", preexec=one_cpu()) as a:
        assert workers(a) == 3                  # the flag wins


def _mounts():
    """(fstype, mount point, super options) of each cgroup mount."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            fstype, _, sup = right.split()[:3]
            if fstype in ("cgroup", "cgroup2"):
                out.append((fstype, left.split()[4].replace("\\040", " "), sup))
    return out


def _cgroup(controller, v1_files, v2_files):
    """(directory, file the child writes its pid to) of a new cgroup of the
    controller with the files written ({name: text}, v1's or v2's), or
    (None, the reason it cannot be made here)."""
    name = f"attnd-e2e-{controller}-{os.getpid()}"
    mounts = _mounts()
    v1 = [m for fs, m, sup in mounts if fs == "cgroup" and controller in sup.split(",")]
    v2 = [m for fs, m, _ in mounts if fs == "cgroup2"]
    try:
        if v1:
            d, files, procs = os.path.join(v1[0], name), v1_files, "tasks"
        elif v2:
            with open(os.path.join(v2[0], "cgroup.subtree_control")) as f:
                if controller not in f.read().split():
                    return None, f"cgroup v2's root does not delegate the {controller} controller"
            d, files, procs = os.path.join(v2[0], name), v2_files, "cgroup.procs"
        else:
            return None, f"no cgroup {controller} controller is mounted"
        os.mkdir(d)
    except OSError as e:
        return None, f"cannot make a {controller} cgroup here: {e}"
    try:
        for f, text in files.items():
            with open(os.path.join(d, f), "w") as out:
                out.write(text)
        return d, os.path.join(d, procs)
    except OSError as e:
        os.rmdir(d)
        return None, f"cannot set a {controller} cgroup's limit here: {e}"


def _joining(procs):
    """A preexec_fn moving the child into the cgroup of that procs file."""
    def join():
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    return join


def _remove(d):
    for _ in range(50):                        # empty once the daemon has exited
        try:
            os.rmdir(d)
            return
        except OSError:
            time.sleep(0.1)
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(os.cpu_count() < 2, reason="one CPU online: a quota changes nothing")
def test_a_cpu_quota_of_half_a_cpu_starts_one_worker():
    d, procs = _cgroup("cpu", {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000"},
                       {"cpu.max": "50000 100000"})
    if d is None:
        pytest.skip(procs)
    try:
        with Attnd(preexec=_joining(procs)) as a:
            assert workers(a) == 1
            assert listening(a)["cpus"] == "1"
            said = [e["msg"] for e in events(a) if e["msg"].startswith("CPUs:")]
            assert len(said) == 1 and "cgroup quota 1" in said[0], said
    finally:
        _remove(d)


def test_a_memory_limit_below_the_bounds_is_warned_of():
    gib = str(1 << 30)
    d, procs = _cgroup("memory", {"memory.limit_in_bytes": gib}, {"memory.max": gib})
    if d is None:
        pytest.skip(procs)
    try:
        # 1 GiB of cache + 512 MiB of bodies + 96 MiB kept > 1 GiB
        with Attnd(preexec=_joining(procs)) as a:
            warn = [e["msg"] for e in events(a) if e["level"] == "warn"]
            assert len(warn) == 1, warn
            assert "memory limit is 1024 MiB" in warn[0] and "1024 MiB of KV cache" in warn[0] \
                and "512 MiB of request bodies" in warn[0] and "96 MiB of blocks" in warn[0], warn
        # 256 + 512 + 96 MiB fit
        with Attnd("--max-cache-bytes", "256m", preexec=_joining(procs)) as a:
            assert [e for e in events(a) if e["level"] != "info"] == []
    finally:
        _remove(d)


def _vm_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize")


def _address_space(limit):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_an_address_space_too_small_for_the_pool_stops_the_start():
    small = {"q": [[0.5] * 16] * 64, "k": [[0.25] * 16] * 64, "v": [[1.0] * 16] * 64}
    with Attnd("--workers", "1", "--http-threads", "2") as a:
        assert a.post("/v1/attention", small).status == 200
        limit = _vm_bytes(a.proc.pid) + (256 << 20)
    # the same limit holds a pool of 3 threads and their requests ...
    with Attnd("--workers", "1", "--http-threads", "2", preexec=_address_space(limit)) as a:
        assert a.post("/v1/attention", small).status == 200
        time.sleep(1.5)                         # the housekeeping's sweep ran on the pool
        assert a.proc.poll() is None and a.get("/healthz").status == 200
    # ... but not 129 (--workers 64), whose stacks take 1 GiB: the start
    # stops, where a SIGABRT used to end the daemon once it served (at the
    # first request on the pool, or the housekeeping's sweep a second in)
    a = Attnd("--workers", "64", "--http-threads", "2", wait=False,
              preexec=_address_space(limit))
    try:
        rc = a.wait(timeout=20)
        assert rc == 1, f"exit {rc}: {a.logs()[-2000:]}"
        err = [e["msg"] for e in events(a) if e["level"] == "error"]
        assert len(err) == 1 and "cannot start the compute pool" in err[0] \
            and "of its 129 threads" in err[0] and "ulimit -v" in err[0], err
        assert not os.path.exists(a.port_file)  # it never listened
    finally:
        a.stop()

"""tests/e2e/test_e2e_cpus.py — --workers and --http-threads default to the
CPUs attnd may use, not to those the machine has (server/cpus.c):

- under an affinity mask of one CPU (taskset) attnd starts one worker;
- in a cgroup with a CPU quota of half a CPU (docker --cpus 0.5, a
  Kubernetes limit of 500m) it starts one worker too, and says why; the
  cgroup is made here, under cgroup v1's cpu controller or cgroup v2's
  unified hierarchy, whichever this machine lets root write (skipped with
  the reason otherwise);
- an explicit --workers still wins.
"""
import os
import shutil
import time

import pytest

from attnd_proc import Attnd
from test_e2e_startup import events


def listening(a):
    return next(e for e in events(a) if e["msg"] == "listening")


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


def _half_cpu_cgroup():
    """(directory, file the child writes its pid to) of a new cgroup with a
    quota of half a CPU, or a reason it cannot be made here."""
    name = f"attnd-e2e-{os.getpid()}"
    mounts = _mounts()
    v1 = [m for fs, m, sup in mounts if fs == "cgroup" and "cpu" in sup.split(",")]
    v2 = [m for fs, m, _ in mounts if fs == "cgroup2"]
    try:
        if v1:
            d = os.path.join(v1[0], name)
            os.mkdir(d)
            with open(os.path.join(d, "cpu.cfs_period_us"), "w") as f:
                f.write("100000")
            with open(os.path.join(d, "cpu.cfs_quota_us"), "w") as f:
                f.write("50000")
            return d, os.path.join(d, "tasks")
        if v2:
            with open(os.path.join(v2[0], "cgroup.subtree_control")) as f:
                if "cpu" not in f.read().split():
                    return None, "cgroup v2's root does not delegate the cpu controller"
            d = os.path.join(v2[0], name)
            os.mkdir(d)
            with open(os.path.join(d, "cpu.max"), "w") as f:
                f.write("50000 100000")
            return d, os.path.join(d, "cgroup.procs")
    except OSError as e:
        return None, f"cannot make a cgroup here: {e}"
    return None, "no cgroup cpu controller is mounted"


def test_a_cpu_quota_of_half_a_cpu_starts_one_worker():
    d, procs = _half_cpu_cgroup()
    if d is None:
        pytest.skip(procs)

    def join():
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    try:
        with Attnd(preexec=join) as a:
            assert workers(a) == 1
            assert listening(a)["cpus"] == "1"
            said = [e["msg"] for e in events(a) if e["msg"].startswith("CPUs:")]
            assert len(said) == 1 and "cgroup quota 1" in said[0], said
    finally:
        for _ in range(50):                    # empty once the daemon has exited
            try:
                os.rmdir(d)
                break
            except OSError:
                time.sleep(0.1)
        else:
            shutil.rmtree(d, ignore_errors=True)

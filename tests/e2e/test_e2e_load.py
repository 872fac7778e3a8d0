"""tests/e2e/test_e2e_load.py — mixed load against the real daemon.

Stateless requests, session decode steps and ~5% malformed requests from
keep-alive client threads (tests/bench/load_driver.py) for ATTND_LOAD_SECONDS
(default 8 s; .ci/run's slow suite sets 60). Requires: zero 5xx, zero
connection errors, every answer the expected one; resident memory flat after
a warm-up (the measured phase ends within 10% of where it began, with a
1 MiB floor for allocator noise); open file descriptors back to the
baseline once the clients hang up. (Under ASan/TSan the memory check is
skipped: their allocators quarantine freed memory; LeakSanitizer covers leaks.)
"""
import json
import os
import sys

from attnd_proc import Attnd

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import load_driver  # noqa: E402

SECONDS = float(os.environ.get("ATTND_LOAD_SECONDS", "8"))
THREADS = int(os.environ.get("ATTND_LOAD_THREADS", "4"))


def test_mixed_load_no_errors_flat_memory_fds_back():
    with Attnd("--max-sessions", "64") as d:
        pid = d.proc.pid
        fd_base = load_driver.fd_count(pid)

        warm = load_driver.run_load(d.port, max(2.0, SECONDS * 0.25), THREADS, seed=1)
        assert warm.server_errors == 0 and warm.conn_errors == 0, warm.summary()
        rss_before = load_driver.rss_kib(pid)

        stats = load_driver.run_load(d.port, SECONDS, THREADS, seed=2)
        rss_after = load_driver.rss_kib(pid)
        summary = stats.summary()
        summary.update(rss_kib_before=rss_before, rss_kib_after=rss_after,
                       seconds=SECONDS, threads=THREADS)
        print("load:", json.dumps(summary))

        assert stats.requests > 0
        assert stats.server_errors == 0, summary
        assert stats.conn_errors == 0, summary
        assert stats.unexpected == 0, summary
        assert summary["by_kind"].get("malformed", 0) > 0, summary
        assert summary["by_kind"].get("decode", 0) > 0, summary
        if not load_driver.sanitized(pid):      # ASan's quarantine holds freed memory
            assert rss_after <= max(rss_before * 1.10, rss_before + 1024), \
                f"RSS grew from {rss_before} KiB to {rss_after} KiB under steady load"

        fds = load_driver.wait_fds(pid, fd_base, timeout=10)
        assert fds <= fd_base, f"fds {fds} after the clients left, baseline {fd_base}"
        assert d.get("/healthz").status == 200
        assert d.proc.poll() is None
        rc = d.stop()
        assert rc == 0, f"attnd exited {rc} on SIGTERM: {d.logs()[-3000:]}"

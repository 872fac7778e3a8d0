"""tests/e2e/test_e2e_crash.py — the journal of --state-dir under real kill -9.

- Crash suite: clients append to several sessions as fast as answers come
  while the daemon is killed with SIGKILL at random moments, 20 rounds with
  --fsync always (snapshots are rewritten during the rounds): after each
  restart every acknowledged append is present with identical bytes, and the
  one append in flight per session is wholly present or wholly absent.
  With --fsync everysec, what is missing is only what was acknowledged in
  the last moments before the kill. A session that reaches its max_tokens
  (409 session_full, only when it is exactly full) is deleted and replaced
  by a new one between rounds; with --fsync always a deleted session stays
  deleted across the kills. Whatever a client thread meets other than
  answers 200, that one 409 and the kill itself fails the test.
- Torn tails: the journal cut by a few bytes, cut inside its last record, a
  byte flipped in the middle: the daemon starts, keeps every record before
  the damage, applies nothing after it, and says how many it kept and
  dropped.
- Disk full on a small tmpfs (skipped with a message when mounting is not
  permitted): 503 storage_unavailable with Retry-After, the session as it
  was, the failure counted in /metrics, and appends succeed again once
  space is freed, without a restart.
- One daemon per state directory: a second one on a directory in use
  exits 1 naming the first one's pid, and the first keeps serving with its
  sessions whole; once the first is killed with SIGKILL the directory is
  free at once (nothing stale is left) and a new daemon restores them.
"""
import http.client
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time

import pytest

from attnd_proc import Attnd, http_connection

D = 8           # d_k = d_v
M = 4           # rows per append
MAX_ROWS = 8192   # max_tokens of the crash suite's sessions (a multiple of M)


def _rows(sess_no, first, m=M):
    """m distinct rows of session sess_no starting at row `first`; every
    value is exact in float32 and prints exactly."""
    return [[((sess_no * 100003 + (first + i) * D + j) % 4096) / 16.0 for j in range(D)]
            for i in range(m)]


def _create(d):
    r = d.post("/v1/sessions", {"d_k": D, "d_v": D, "max_tokens": MAX_ROWS})
    assert r.status == 201, r
    return r.json()["id"]


def _kv_rows(d, sid):
    r = d.get(f"/v1/sessions/{sid}/kv")
    assert r.status == 200, r
    doc = r.json()
    return doc["k"], doc["v"]


def _error_code(data):
    try:
        return json.loads(data)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


class Client(threading.Thread):
    """Appends to one session until the connection dies or the session is
    full. What goes wrong is kept in `error` for the test to assert on (an
    exception in a thread would only be a warning)."""

    def __init__(self, port, sid, sess_no, acked):
        super().__init__(daemon=True)
        self.port, self.sid, self.no = port, sid, sess_no
        self.acked = acked                  # rows acknowledged so far (list)
        self.inflight = None                # rows sent, answer not seen
        self.ack_times = []                 # (time, rows after it)
        self.full = False                   # answered 409 session_full
        self.cut_at = None                  # when the connection died
        self.error = None                   # anything else that went wrong

    def run(self):
        conn = http_connection(self.port, timeout=10)
        try:
            self._append(conn)
        except (OSError, http.client.HTTPException):
            self.cut_at = time.monotonic()  # the daemon was killed (checked)
        except Exception as e:              # pylint: disable=broad-except
            self.error = e
        finally:
            conn.close()

    def _append(self, conn):
        while True:
            rows = _rows(self.no, len(self.acked))
            body = json.dumps({"k": rows, "v": [[-x for x in r] for r in rows],
                               "expected_length": len(self.acked)})
            self.inflight = rows
            conn.request("POST", f"/v1/sessions/{self.sid}/kv", body=body,
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            if resp.status == 409 and _error_code(data) == "session_full":
                if len(self.acked) != MAX_ROWS:
                    raise AssertionError(f"session_full at {len(self.acked)} rows, "
                                         f"max_tokens {MAX_ROWS}")
                self.inflight = None        # refused: nothing of it applied
                self.full = True
                return
            if resp.status != 200:
                raise AssertionError(f"append answered {resp.status}: {data[:300]!r}")
            self.acked.extend(rows)
            self.inflight = None
            self.ack_times.append((time.monotonic(), len(self.acked)))


def _start(sd, fsync, extra=()):
    return Attnd("--state-dir", sd, "--fsync", fsync, "--snapshot-min-bytes", "16k",
                 "--workers", "2", *extra)


def _round_trip(fsync, rounds, seed):
    """(rows acknowledged and found over all sessions, acknowledged rows
    lost, snapshots rewritten under traffic, sessions filled and replaced)."""
    rng = random.Random(seed)
    sd = tempfile.mkdtemp(prefix="attnd-crash-")
    n_sess = 4
    acked = [[] for _ in range(n_sess)]
    nos = list(range(n_sess))               # row pattern of each session
    rows_done = 0                           # rows of the sessions replaced
    deleted = []                            # their ids
    late_losses = 0
    rewrites = 0                            # snapshots written under traffic
    try:
        d = _start(sd, fsync)
        sids = [_create(d) for _ in range(n_sess)]
        for rnd in range(rounds):
            clients = [Client(d.port, sids[i], nos[i], acked[i]) for i in range(n_sess)]
            for c in clients:
                c.start()
            # The snapshot timer ticks each second, and a rewrite needs a
            # journal larger than the snapshot the start wrote (all rows so
            # far): the first round, from an empty snapshot, runs through
            # two ticks so that one rewrite under traffic is certain even on
            # a slow (sanitizer) build; the others end at random moments.
            time.sleep(2.5 if rnd == 0 else rng.uniform(0.05, 1.6))
            kill_at = time.monotonic()
            d.proc.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            d.proc.wait(timeout=10)
            d.stop()
            # less the start's, when it wrote one (it keeps the snapshot
            # when its journal was empty: a kill right after a rewrite)
            logs = d.logs()
            rewrites += logs.count(" written: ") - logs.count("written at start")
            for i, c in enumerate(clients):
                c.join(timeout=10)
                assert not c.is_alive()
                assert c.error is None, f"round {rnd}: session {i}: {c.error!r}"
                assert c.full or c.cut_at >= kill_at, \
                    f"round {rnd}: session {i}: connection lost before the kill"
            d = _start(sd, fsync)
            for i, c in enumerate(clients):
                k, v = _kv_rows(d, sids[i])
                have = len(k)
                want = acked[i]
                full = want + (c.inflight or [])
                assert have <= len(full), f"round {rnd}: session {i} has rows never sent"
                assert k == full[:have], f"round {rnd}: session {i}: rows differ"
                assert v == [[-x for x in r] for r in full[:have]]
                if fsync == "always":
                    assert have in (len(want), len(full)), \
                        f"round {rnd}: session {i}: {have} rows, acked {len(want)}, " \
                        f"in flight {len(full) - len(want)}"
                else:
                    assert have % M == 0, f"round {rnd}: session {i}: half an append"
                    if have < len(want):
                        # lost acknowledged appends: only the last moments
                        lost_since = min(t for t, n in c.ack_times if n > have)
                        assert killed_at - lost_since < 2.5, \
                            f"round {rnd}: lost appends acknowledged {killed_at - lost_since:.2f}s " \
                            "before the kill"
                        late_losses += len(want) - have
                del acked[i][have:]
                acked[i].extend(full[len(acked[i]):have])
            if fsync == "always":           # a deletion is acknowledged like an append
                for sid in deleted:
                    assert d.get(f"/v1/sessions/{sid}").status == 404, \
                        f"round {rnd}: deleted session {sid} is back"
            for i in range(n_sess):
                if len(acked[i]) == MAX_ROWS:   # full: a new session in its place
                    r = d.request("DELETE", f"/v1/sessions/{sids[i]}")
                    assert r.status == 204, r
                    deleted.append(sids[i])
                    rows_done += MAX_ROWS
                    sids[i], acked[i], nos[i] = _create(d), [], nos[i] + n_sess
        d.stop()
        return rows_done + sum(len(x) for x in acked), late_losses, rewrites, len(deleted)
    finally:
        shutil.rmtree(sd, ignore_errors=True)


def test_crash_suite_fsync_always_keeps_every_acknowledged_append():
    total, _, rewrites, replaced = _round_trip("always", 20, seed=19)
    print(f"crash suite (always): 20 rounds, {total} rows acknowledged and found, "
          f"{rewrites} snapshots rewritten under traffic, {replaced} full sessions replaced")
    assert total > 20 * M, "too few appends to mean anything"
    assert rewrites > 0, "no snapshot was rewritten during the rounds"


def test_crash_suite_fsync_everysec_loses_only_the_last_moments():
    total, lost, _, replaced = _round_trip("everysec", 6, seed=23)
    print(f"crash suite (everysec): 6 rounds, {total} rows, {replaced} full sessions replaced, "
          f"{lost} acknowledged rows lost (a kill -9 leaves the page cache, so "
          "usually none)")


# ---- torn and corrupt journals ---------------------------------------------------

def _records(path):
    """(offset, length) of every whole record of a journal file."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    off = 24
    while off + 4 <= len(data):
        (n,) = struct.unpack_from("<I", data, off)
        if off + 4 + n + 4 > len(data):
            break
        out.append((off, 4 + n + 4))
        off += 4 + n + 4
    return out, len(data)


def _journal_with_appends(sd, appends):
    """A state dir whose journal holds a create and `appends` appends of one
    row each (killed, so nothing was folded into a snapshot)."""
    d = _start(sd, "always", ("--snapshot-min-bytes", "1g"))
    r = d.post("/v1/sessions", {"d_k": D, "d_v": D})
    sid = r.json()["id"]
    for i in range(appends):
        rows = _rows(0, i, 1)
        assert d.post(f"/v1/sessions/{sid}/kv", {"k": rows, "v": rows}).status == 200
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(timeout=10)
    d.stop()
    journals = sorted(n for n in os.listdir(sd) if n.startswith("journal."))
    path = os.path.join(sd, journals[-1])
    recs, size = _records(path)
    assert len(recs) == 1 + appends, recs
    return sid, path, recs, size


def _restart_length(sd, sid):
    d = _start(sd, "always")
    try:
        r = d.get(f"/v1/sessions/{sid}")
        length = r.json()["length"] if r.status == 200 else None
        if length:
            k, _ = _kv_rows(d, sid)
            assert k == [_rows(0, i, 1)[0] for i in range(length)], "rows differ"
        return length, d.logs()
    finally:
        d.stop()


@pytest.mark.parametrize("damage", ["few_bytes", "partial_record", "flipped_byte"])
def test_damaged_journal_keeps_every_record_before_the_damage(damage):
    sd = tempfile.mkdtemp(prefix="attnd-torn-")
    try:
        sid, path, recs, size = _journal_with_appends(sd, 12)
        if damage == "few_bytes":
            os.truncate(path, size - 3)
            kept, dropped, length = 12, 1, 11
        elif damage == "partial_record":
            off, n = recs[9]                # the 9th append, cut inside
            os.truncate(path, off + n // 2)
            kept, dropped, length = 9, 1, 8
        else:
            off, n = recs[6]                # the 6th append: a byte of its rows
            with open(path, "r+b") as f:
                f.seek(off + n - 10)
                b = f.read(1)
                f.seek(off + n - 10)
                f.write(bytes([b[0] ^ 0x10]))
            kept, dropped, length = 6, 7, 5
        got, logs = _restart_length(sd, sid)
        assert got == length, f"{damage}: length {got}, want {length}: {logs[-1500:]}"
        assert f"{kept} records kept, {dropped} dropped" in logs, logs[-1500:]
        assert "nothing after it is applied" in logs
        # the daemon goes on journaling past the damage: a later restart
        # still has the session and what is appended next
        d = _start(sd, "always")
        rows = _rows(0, length, 1)
        assert d.post(f"/v1/sessions/{sid}/kv", {"k": rows, "v": rows}).status == 200
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(timeout=10)
        d.stop()
        got, _ = _restart_length(sd, sid)
        assert got == length + 1
        if damage == "flipped_byte":      # mid-file damage is kept for a look
            assert any(n.endswith(".copy") for n in os.listdir(sd)), os.listdir(sd)
    finally:
        shutil.rmtree(sd, ignore_errors=True)


def test_files_kept_for_a_look_are_counted_in_metrics():
    """attnd_state_kept_files and _bytes count the copies and set-aside
    files in the state directory as it is at the scrape: they go back to 0
    once the operator removes them."""
    sd = tempfile.mkdtemp(prefix="attnd-kept-")
    try:
        _sid, path, recs, _size = _journal_with_appends(sd, 4)
        off, n = recs[2]
        with open(path, "r+b") as f:         # a byte of the 2nd append's rows
            f.seek(off + n - 10)
            b = f.read(1)
            f.seek(off + n - 10)
            f.write(bytes([b[0] ^ 0x10]))
        d = _start(sd, "always")
        try:
            kept = [n for n in os.listdir(sd) if n.endswith((".copy", ".setaside"))]
            assert kept, os.listdir(sd)
            size = sum(os.path.getsize(os.path.join(sd, n)) for n in kept)
            assert _metric(d, "attnd_state_kept_files") == len(kept)
            assert _metric(d, "attnd_state_kept_bytes") == size
            for n in kept:
                os.unlink(os.path.join(sd, n))
            assert _metric(d, "attnd_state_kept_files") == 0
            assert _metric(d, "attnd_state_kept_bytes") == 0
        finally:
            d.stop()
    finally:
        shutil.rmtree(sd, ignore_errors=True)


# ---- a full disk ------------------------------------------------------------------

def _mount_tmpfs(path, size):
    if os.geteuid() != 0 or not shutil.which("mount"):
        return "not root, cannot mount a small tmpfs"
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return f"mount -t tmpfs not permitted here: {r.stderr.strip()}"
    return None


def _small_disk(prefix):
    """A new directory on a 2 MiB tmpfs (the test skipped when none can be
    mounted: not root, or not permitted)."""
    sd = tempfile.mkdtemp(prefix=prefix)
    why = _mount_tmpfs(sd, "2m")
    if why:
        os.rmdir(sd)
        pytest.skip(why)
    return sd


def _fill(sd, leave):
    """A file in sd that fills its disk but for `leave` bytes; its path."""
    filler = os.path.join(sd, "filler")
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    os.truncate(filler, max(0, os.path.getsize(filler) - leave))
    return filler


def _metric(d, name):
    for line in d.get("/metrics").body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_full_disk_refuses_with_503_and_recovers_when_space_returns():
    sd = _small_disk("attnd-full-")
    try:
        d = _start(sd, "always")
        try:
            r = d.post("/v1/sessions", {"d_k": 64, "d_v": 64})
            sid = r.json()["id"]
            small = [[0.5] * 64 for _ in range(4)]
            assert d.post(f"/v1/sessions/{sid}/kv", {"k": small, "v": small}).status == 200
            before = d.get(f"/v1/sessions/{sid}/kv").body
            # fill the disk, leaving less than one big append's record
            filler = _fill(sd, 16384)
            big = [[0.25] * 64 for _ in range(256)]      # 128 KiB of rows
            r = d.post(f"/v1/sessions/{sid}/kv", {"k": big, "v": big})
            assert r.status == 503, r
            assert r.json()["error"]["code"] == "storage_unavailable", r
            assert r.headers.get("retry-after") == "1", r.headers
            assert d.get(f"/v1/sessions/{sid}/kv").body == before, "session changed"
            assert d.get(f"/v1/sessions/{sid}").json()["length"] == 4
            r = d.post("/v1/sessions", {"d_k": 64, "d_v": 64})
            assert r.status in (201, 503), r
            assert _metric(d, "attnd_journal_write_failures_total") >= 1
            assert d.get("/healthz").status == 200
            # space returns: the same append succeeds, no restart
            os.unlink(filler)
            r = d.post(f"/v1/sessions/{sid}/kv", {"k": big, "v": big})
            assert r.status == 200, r
            assert "writes succeed again" in d.logs()
            d.proc.send_signal(signal.SIGKILL)
            d.proc.wait(timeout=10)
        finally:
            d.stop()
        d = _start(sd, "always")
        try:
            k, _ = _kv_rows(d, sid)
            assert k == small + big
        finally:
            d.stop()
    finally:
        subprocess.run(["umount", sd], capture_output=True)
        shutil.rmtree(sd, ignore_errors=True)


def test_a_failed_snapshot_is_counted_in_metrics():
    """A snapshot that does not fit on the disk is counted in
    attnd_snapshot_failures_total (the journal is kept and grows)."""
    sd = _small_disk("attnd-snapfail-")
    try:
        # the disk full but for 320 KiB: the journal takes 200 KiB of rows,
        # the snapshot of them does not fit in what is left
        _fill(sd, 320 * 1024)
        d = _start(sd, "always")
        try:
            assert _metric(d, "attnd_snapshot_failures_total") == 0
            sid = d.post("/v1/sessions", {"d_k": 64, "d_v": 64}).json()["id"]
            rows = [[0.25] * 64 for _ in range(200)]     # float64: 200 KiB of K and V
            assert d.post(f"/v1/sessions/{sid}/kv", {"k": rows, "v": rows}).status == 200
            deadline = time.time() + 10
            while time.time() < deadline and \
                    _metric(d, "attnd_snapshot_failures_total") < 1:
                time.sleep(0.1)
            assert _metric(d, "attnd_snapshot_failures_total") >= 1, d.logs()[-1500:]
            assert "snapshot failed" in d.logs()
            assert d.get(f"/v1/sessions/{sid}").json()["length"] == 200
        finally:
            d.stop()
    finally:
        subprocess.run(["umount", sd], capture_output=True)
        shutil.rmtree(sd, ignore_errors=True)


def test_a_state_directory_serves_one_daemon_at_a_time():
    sd = tempfile.mkdtemp(prefix="attnd-lock-")
    first = None
    try:
        first = _start(sd, "always")
        sid = _create(first)
        rows = _rows(0, 0)
        body = {"k": rows, "v": [[-x for x in r] for r in rows]}
        assert first.post(f"/v1/sessions/{sid}/kv", body).status == 200
        with Attnd("--state-dir", sd, wait=False) as second:
            assert second.proc.wait(timeout=30) == 1, second.logs()
            text = second.logs()
        assert f"is in use by another process (pid {first.proc.pid} on " in text, text
        assert "listening" not in text
        assert _kv_rows(first, sid)[0] == rows            # the first one whole
        assert first.post(f"/v1/sessions/{sid}/kv", body).status == 200
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=10)
        first.stop()
        with _start(sd, "always") as third:
            assert _kv_rows(third, sid)[0] == rows + rows
    finally:
        if first:
            first.stop()
        shutil.rmtree(sd, ignore_errors=True)

"""tests/e2e/test_e2e_idempotency.py — Idempotency-Key on the routes that
make a session, across kill -9.

A create, fork or import whose answer never reached its client is retried
with the same key after attnd was killed with SIGKILL (its journal record
written, the answer lost with the process) and started again on the same
--state-dir: the retry answers 201 for the session the first request made
(same id, Location, Idempotent-Replayed: true) and makes no second one
(attnd_sessions counts one each). The same key with another body is 422
idempotency_key_reused, and a deleted session's key makes a new session.
Whitespace after a key (RFC 9110 5.5) is not part of it.
"""
import signal

from attnd_proc import Attnd

D = 4
ROWS = [[float(i + j) for j in range(D)] for i in range(3)]


def _start(sd):
    return Attnd("--state-dir", sd, "--fsync", "always")


def _kill(d):
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(timeout=10)
    d.stop()


def _replayed(r, sid):
    assert r.status == 201, r
    assert r.json()["id"] == sid
    assert r.headers.get("location") == f"/v1/sessions/{sid}"
    assert r.headers.get("idempotent-replayed") == "true"


def test_create_retried_after_kill_answers_the_same_session(tmp_path):
    sd = str(tmp_path / "state")
    body = {"d_k": D, "d_v": D}
    d = _start(sd)
    r = d.post("/v1/sessions", body, headers={"Idempotency-Key": "create-1"})
    assert r.status == 201 and "idempotent-replayed" not in r.headers
    sid = r.json()["id"]
    _kill(d)
    d = _start(sd)
    try:
        _replayed(d.post("/v1/sessions", body, headers={"Idempotency-Key": "create-1"}), sid)
        assert d.metric("attnd_sessions") == 1
        r = d.post("/v1/sessions", {"d_k": D, "d_v": 2 * D},
                   headers={"Idempotency-Key": "create-1"})
        assert r.status == 422 and r.json()["error"]["code"] == "idempotency_key_reused"
        assert d.metric("attnd_sessions") == 1
        assert d.request("DELETE", f"/v1/sessions/{sid}").status == 204
        r = d.post("/v1/sessions", body, headers={"Idempotency-Key": "create-1"})
        assert r.status == 201 and r.json()["id"] != sid
        assert "idempotent-replayed" not in r.headers
    finally:
        d.stop()


def test_fork_and_import_retried_after_kill_answer_the_same_sessions(tmp_path):
    sd = str(tmp_path / "state")
    d = _start(sd)
    parent = d.post("/v1/sessions", {"d_k": D, "d_v": D}).json()["id"]
    assert d.post(f"/v1/sessions/{parent}/kv", {"k": ROWS, "v": ROWS}).status == 200
    r = d.post(f"/v1/sessions/{parent}/fork", None, headers={"Idempotency-Key": "fork-1"})
    assert r.status == 201
    child = r.json()["id"]
    exported = d.get(f"/v1/sessions/{parent}/export").body
    imp_headers = {"Content-Type": "application/octet-stream", "Idempotency-Key": "import-1"}
    r = d.post("/v1/sessions/import", exported, headers=imp_headers)
    assert r.status == 201
    imported = r.json()["id"]
    _kill(d)
    d = _start(sd)
    try:
        r = d.post(f"/v1/sessions/{parent}/fork", None, headers={"Idempotency-Key": "fork-1"})
        _replayed(r, child)
        assert r.json()["length"] == len(ROWS)
        _replayed(d.post("/v1/sessions/import", exported, headers=imp_headers), imported)
        assert d.metric("attnd_sessions") == 3
        # the export carries no key: importing the imported session's
        # export under another key makes a new session
        again = d.get(f"/v1/sessions/{imported}/export").body
        r = d.post("/v1/sessions/import", again,
                   headers={**imp_headers, "Idempotency-Key": "import-2"})
        assert r.status == 201 and r.json()["id"] not in (parent, child, imported)
        assert d.metric("attnd_sessions") == 4
    finally:
        d.stop()


def test_a_keyed_fork_shares_its_parents_pages_after_kill(tmp_path):
    """A keyed fork is journaled whole (its record has room for the key),
    so the replay after a kill -9 rebuilt it with pages of its own: the
    cache counted the parent's pages twice (over --max-cache-bytes for a
    cache that fit) until the next start read them from a snapshot. It
    shares them again, as an unkeyed fork and a snapshot's forks do."""
    sd = str(tmp_path / "state")
    d = _start(sd)
    parent = d.post("/v1/sessions", {"d_k": D, "d_v": D}).json()["id"]
    rows = [[float(i * D + j) for j in range(D)] for i in range(640)]
    assert d.post(f"/v1/sessions/{parent}/kv", {"k": rows, "v": rows}).status == 200
    held = d.metric("attnd_kv_cache_bytes")
    r = d.post(f"/v1/sessions/{parent}/fork", None, headers={"Idempotency-Key": "fork-2"})
    assert r.status == 201 and r.json()["bytes"] == 0, r
    child = r.json()["id"]
    assert d.metric("attnd_kv_cache_bytes") == held
    _kill(d)
    d = _start(sd)
    try:
        assert d.metric("attnd_kv_cache_bytes") == held
        info = d.get(f"/v1/sessions/{child}").json()
        assert info["length"] == 640 and info["bytes"] == 0, info
        assert info["shared_bytes"] == held
        _replayed(d.post(f"/v1/sessions/{parent}/fork", None,
                         headers={"Idempotency-Key": "fork-2"}), child)
        # still each its own once written: the child's append copies no
        # page of the parent's rows it does not write
        assert d.post(f"/v1/sessions/{child}/kv", {"k": ROWS, "v": ROWS}).status == 200
        assert d.get(f"/v1/sessions/{parent}/kv").json()["k"] == rows
    finally:
        d.stop()


def test_whitespace_after_the_key_is_not_part_of_it():
    """RFC 9110 5.5: whitespace around a field value is not part of it, so
    "k1 \\t" is the key k1 (libmicrohttpd keeps the trailing whitespace):
    made once, replayed for either spelling; a value of whitespace alone is
    no key, 400."""
    d = Attnd()
    try:
        body = {"d_k": D, "d_v": D}
        r = d.post("/v1/sessions", body, headers={"Idempotency-Key": "k1 \t"})
        assert r.status == 201, r
        sid = r.json()["id"]
        _replayed(d.post("/v1/sessions", body, headers={"Idempotency-Key": "k1"}), sid)
        _replayed(d.post("/v1/sessions", body, headers={"Idempotency-Key": "k1  "}), sid)
        r = d.post("/v1/sessions", body, headers={"Idempotency-Key": " \t "})
        assert r.status == 400 and r.json()["error"]["code"] == "bad_request", r
        assert d.metric("attnd_sessions") == 1
    finally:
        d.stop()


def test_a_keyed_fork_leaves_its_family_sharing_after_kill(tmp_path):
    """The pages shared again after a replay are the first seen of their
    bytes: a keyed fork's own copies, seen first (the most recently used),
    took the unkeyed forks away from the pages they shared with their
    parent, and the parent's last page, partly used after a truncate and
    so not looked at, stayed its own: one page more than before the kill.
    Pages a journal's fork records already share are the ones kept."""
    sd = str(tmp_path / "state")
    d = _start(sd)
    parent = d.post("/v1/sessions", {"d_k": D, "d_v": D}).json()["id"]
    rows = [[float(i * D + j) for j in range(D)] for i in range(200)]
    assert d.post(f"/v1/sessions/{parent}/kv", {"k": rows, "v": rows}).status == 200
    forks = []
    for key in (None, "fork-3"):                # the keyed one used last
        r = d.post(f"/v1/sessions/{parent}/fork", None,
                   headers={"Idempotency-Key": key} if key else {})
        assert r.status == 201, r
        forks.append(r.json()["id"])
        assert d.post(f"/v1/sessions/{forks[-1]}/kv", {"k": ROWS, "v": ROWS}).status == 200
    # rows 64..99 of the parent's second page, shared with both forks
    assert d.post(f"/v1/sessions/{parent}/truncate", {"length": 100}).status == 200
    before = [d.get(f"/v1/sessions/{s}").json() for s in [parent] + forks]
    held = d.metric("attnd_kv_cache_bytes")
    assert before[0]["bytes"] == 0, before[0]
    _kill(d)
    d = _start(sd)
    try:
        after = [d.get(f"/v1/sessions/{s}").json() for s in [parent] + forks]
        assert [(a["length"], a["bytes"], a["shared_bytes"]) for a in after] == \
            [(b["length"], b["bytes"], b["shared_bytes"]) for b in before]
        assert d.metric("attnd_kv_cache_bytes") == held
        assert d.get(f"/v1/sessions/{parent}/kv").json()["k"] == rows[:100]
    finally:
        d.stop()

"""What attnd says when it starts: a default start-up, --http-threads 1 and a
restore of sessions print nothing above info; a restore that had to drop
something warns."""
import glob
import json
import os
import shutil
import tempfile

from attnd_proc import Attnd


def levels(d):
    out = []
    for line in d.logs().splitlines():
        try:
            out.append((json.loads(line)["level"], json.loads(line)["msg"]))
        except (ValueError, KeyError):
            out.append(("raw", line))
    return out


def loud(d):
    return [(lv, m) for lv, m in levels(d) if lv != "info"]


def test_start_up_is_quiet_with_one_or_more_http_threads():
    for flags in ((), ("--http-threads", "1"), ("--http-threads", "2")):
        with Attnd(*flags) as d:
            assert d.get("/healthz").status == 200
            assert loud(d) == [], (flags, loud(d))


def test_restoring_sessions_logs_at_info_unless_something_is_skipped():
    sd = tempfile.mkdtemp(prefix="attnd-startup-")
    try:
        with Attnd("--state-dir", sd) as d:
            r = d.post("/v1/sessions", {"d_k": 2, "d_v": 2})
            assert r.status == 201, r
            sid = r.json()["id"]
        with Attnd("--state-dir", sd) as d:
            assert d.get(f"/v1/sessions/{sid}").status == 200
            assert loud(d) == [], loud(d)
            assert any("restored" in m for _, m in levels(d))
        journals = sorted(glob.glob(os.path.join(sd, "journal.*")))
        assert journals, os.listdir(sd)
        with open(journals[-1], "ab") as f:
            f.write(b"\x01not a record at all, a torn tail" * 4)
        with Attnd("--state-dir", sd) as d:
            assert d.get(f"/v1/sessions/{sid}").status == 200
            warned = [m for lv, m in levels(d) if lv == "warn"]
            assert any("dropped" in m for m in warned), levels(d)
    finally:
        shutil.rmtree(sd, ignore_errors=True)

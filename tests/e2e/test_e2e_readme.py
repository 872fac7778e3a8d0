"""tests/e2e/test_e2e_readme.py — README's examples and lists, against attnd.

Every ```sh block of the "Quick start" section is run with bash against a
fresh attnd (localhost:8080 replaced by its port); the ```json block right
after it is the answer it must give: every key shown must be there with the
same value (numbers to 1e-9 relative), keys left out of the README are not
checked (meta, elapsed time, messages); so is every command of "A tour by
task" that a ```json answer follows (the OIP v2 request). The session
commands of "A tour by task" and "Sessions" are run the same way and checked against what the
README says of them. The configuration table must match `attnd --help`,
the metric names the README gives what /metrics prints, and the error codes
and statuses of "Errors" the server's table and its OpenAPI document.
"""
import json
import os
import re
import subprocess

import pytest

from attnd_proc import E2E_TLS, Attnd

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def section(title):
    text = open(README, encoding="utf-8").read()
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, f"README has no {title} section"
    return m.group(1)


def sh_blocks(title):
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", section(title), re.S)]


def quick_start_blocks(title="Quick start"):
    blocks = re.findall(r"```(sh|json)\n(.*?)```", section(title), re.S)
    pairs = []
    for i, (lang, body) in enumerate(blocks):
        if lang != "sh":
            continue
        expect = blocks[i + 1][1] if i + 1 < len(blocks) and blocks[i + 1][0] == "json" else None
        pairs.append((body.strip(), expect))
    return pairs


def matches(want, got, path=""):
    if isinstance(want, dict):
        assert isinstance(got, dict), path
        for k, v in want.items():
            assert k in got, f"{path}/{k} missing"
            matches(v, got[k], f"{path}/{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (a, b) in enumerate(zip(want, got)):
            matches(a, b, f"{path}/{i}")
    elif isinstance(want, (int, float)) and not isinstance(want, bool):
        assert isinstance(got, (int, float)) and abs(got - want) <= 1e-9 * max(1, abs(want)), \
            f"{path}: {got} != {want}"
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"


def test_readme_starts_with_the_two_setup_commands():
    text = open(README, encoding="utf-8").read()
    first = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    cmds = [line.split("#")[0].strip() for line in first.strip().splitlines()]
    assert cmds == ["make run", "make test"]


def test_quick_start_has_commands_with_answers():
    pairs = quick_start_blocks()
    assert len(pairs) >= 4
    assert all(expect for _, expect in pairs)
    assert any('"q":[[1,0]]' in cmd and "[-1,0]" in cmd for cmd, _ in pairs)


@pytest.fixture(scope="module")
def daemon():
    with Attnd() as a:
        yield a


@pytest.mark.skipif(E2E_TLS, reason="the quick start's commands are plain http://")
@pytest.mark.parametrize("index", range(len(quick_start_blocks())))
def test_quick_start_command(daemon, index):
    cmd, expect = quick_start_blocks()[index]
    cmd = cmd.replace("localhost:8080", f"127.0.0.1:{daemon.port}")
    assert "8080" not in cmd
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    matches(json.loads(expect), got)


def tour_answered_blocks():
    return [(cmd, want) for cmd, want in quick_start_blocks("A tour by task") if want]


def test_tour_has_the_oip_v2_example():
    assert any("/v2/models/attention/infer" in cmd for cmd, _ in tour_answered_blocks())


@pytest.mark.skipif(E2E_TLS, reason="the tour's commands are plain http://")
@pytest.mark.parametrize("index", range(len(tour_answered_blocks())))
def test_tour_command_with_its_answer(daemon, index):
    """A tour by task: each command followed by a ```json answer gives it."""
    cmd, expect = tour_answered_blocks()[index]
    (got,) = json_values(run_sh(daemon, cmd))
    matches(json.loads(expect), got)


def test_configuration_table_matches_help():
    from attnd_proc import BIN
    text = open(README, encoding="utf-8").read()
    section = re.search(r"^## Configuration\n(.*?)(?=^## )", text, re.S | re.M).group(1)
    rows = re.findall(r"^\| `--([a-z-]+)` \| `(ATTND_[A-Z_]+)` \| ([^|]+) \|", section, re.M)
    help_text = subprocess.run([BIN, "--help"], capture_output=True, text=True, timeout=10).stdout
    in_help = set(re.findall(r"^  --([a-z-]+)", help_text, re.M)) - {"help", "version"}
    assert {f for f, _, _ in rows} == in_help
    for flag, env, default in rows:
        assert env == "ATTND_" + flag.upper().replace("-", "_")
        m = re.search(rf"^  --{flag} .*\n.*\[{env}; default: ([^\]]+)\]", help_text, re.M)
        assert m, flag
        d = default.strip().strip("`")
        assert m.group(1) == d, (flag, m.group(1), d)


def run_sh(daemon, cmd, cwd=None, env=None):
    """cmd run with bash, localhost:8080 being the daemon; its stdout."""
    cmd = cmd.replace("localhost:8080", f"127.0.0.1:{daemon.port}")
    assert "8080" not in cmd
    r = subprocess.run(["bash", "-e", "-c", cmd], capture_output=True, text=True, timeout=30,
                       cwd=cwd, env=dict(os.environ, **(env or {})))
    assert r.returncode == 0, r.stderr
    return r.stdout


def json_values(text):
    """The JSON values printed one after another (curl -s adds no newline)."""
    dec, out, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        v, i = dec.raw_decode(text, i)
        out.append(v)
    return out


@pytest.mark.skipif(E2E_TLS, reason="the README's commands are plain http://")
def test_tour_session_decode_answers_as_the_stateless_request(daemon):
    """A tour by task: the session commands append two rows, then one more
    with the query, which "answers exactly what the stateless request with
    the three rows would"."""
    cmd = next(b for b in sh_blocks("A tour by task") if "/v1/sessions" in b)
    appended, attended = json_values(run_sh(daemon, cmd))
    assert appended["length"] == 2
    stateless = daemon.post("/v1/attention", {
        "q": [[1, 0]], "k": [[1, 0], [0, 1], [-1, 0]], "v": [[1, 2], [3, 4], [5, 6]],
        "return": ["output"]})
    assert stateless.status == 200
    assert attended["output"] == stateless.json()["output"]
    assert attended["meta"]["L"] == 3


@pytest.mark.skipif(E2E_TLS, reason="the README's commands are plain http://")
def test_sessions_rolling_create_example(daemon):
    cmd = next(b for b in sh_blocks("Sessions") if '"window"' in b)
    (made,) = json_values(run_sh(daemon, cmd))
    assert made["window"] == {"left": 4095, "sinks": 4}
    assert made["held"] == [] and made["length"] == 0
    assert made["rope"]["base"] == 10000
    assert daemon.request("DELETE", f"/v1/sessions/{made['id']}").status == 204


@pytest.mark.skipif(E2E_TLS, reason="the README's commands are plain http://")
def test_sessions_export_import_example(daemon, tmp_path):
    """Moving a session: the export and import commands, the other replica
    being this one; the import is a new session with the same rows."""
    cmd = next(b for b in sh_blocks("Sessions") if "/export" in b)
    cmd = cmd.replace("other-replica:8080", "localhost:8080")
    made = daemon.post("/v1/sessions", {"d_k": 2, "d_v": 2})
    sid = made.json()["id"]
    rows = {"k": [[1, 0], [0, 1], [-1, 0]], "v": [[1, 2], [3, 4], [5, 6]]}
    assert daemon.post(f"/v1/sessions/{sid}/kv", rows).status == 200
    (imported,) = json_values(run_sh(daemon, cmd, cwd=tmp_path, env={"ID": sid}))
    assert (tmp_path / "s.bin").read_bytes()[:8] == b"ATTNDSES"
    assert imported["id"] != sid and imported["length"] == 3
    got = daemon.get(f"/v1/sessions/{imported['id']}/kv").json()
    assert (got["k"], got["v"]) == (rows["k"], rows["v"])


def test_readme_names_every_metric(daemon):
    """The metric names the README gives are those /metrics prints."""
    body = daemon.get("/metrics").body.decode()
    printed = set(re.findall(r"^# TYPE (attnd_[a-z0-9_]+) ", body, re.M))
    text = open(README, encoding="utf-8").read()
    named = set(re.findall(r"`(attnd_[a-z0-9_]+)", text))
    assert not printed - named, f"not in the README: {sorted(printed - named)}"
    assert not named - printed, f"not printed by /metrics: {sorted(named - printed)}"


def readme_error_statuses():
    """{code: status} from the README's "The status follows from the code" list."""
    m = re.search(r"The status follows from the code:(.*?)Under `/v2`", section("Errors"), re.S)
    assert m, "Errors has no list of codes"
    out, status = {}, None
    for num, code in re.findall(r"\b(\d{3})\b|`([a-z_]+)`", m.group(1)):
        if num:
            status = int(num)
        elif code:
            assert status, code
            out[code] = status
    return out


def test_error_codes_are_the_servers(daemon):
    """Every code the README lists exists with that status in api/error.h's
    table, and every code there is listed; the served OpenAPI document's
    ErrorCode holds the same codes."""
    root = os.path.join(os.path.dirname(README))
    table = open(os.path.join(root, "api", "error.h"), encoding="utf-8").read()
    server = {c: int(s) for c, s in re.findall(r'X\(\w+,\s*"([a-z_]+)",\s*(\d{3})', table)}
    assert len(server) > 20
    assert readme_error_statuses() == server
    doc = daemon.get("/v1/openapi.json").json()
    assert sorted(doc["components"]["schemas"]["ErrorCode"]["enum"]) == sorted(server)

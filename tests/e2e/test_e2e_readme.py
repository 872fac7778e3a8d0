"""tests/e2e/test_e2e_readme.py — README's Quick start, run verbatim.

Every ```sh block of the "Quick start" section is run with bash against a
fresh attnd (localhost:8080 replaced by its port); the ```json block right
after it is the answer it must give: every key shown must be there with the
same value (numbers to 1e-9 relative), keys left out of the README are not
checked (meta, elapsed time, messages).
"""
import json
import os
import re
import subprocess

import pytest

from attnd_proc import E2E_TLS, Attnd

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def quick_start_blocks():
    text = open(README, encoding="utf-8").read()
    m = re.search(r"^## Quick start\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "README has no Quick start section"
    blocks = re.findall(r"```(sh|json)\n(.*?)```", m.group(1), re.S)
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

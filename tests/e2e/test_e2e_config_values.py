"""Values attnd refuses at start (README, Configuration: "a bad value prints
what was expected and exits 2"), for the settings where a silent fallback
would hurt: an empty API key, key file, certificate or key (set but empty,
as a Kubernetes secret with an empty key or an unset Compose variable
gives) would otherwise start without authentication or without TLS, an
empty --state-dir without keeping sessions; a
--replica-id that the session store would rewrite breaks the proxy's
routing map; a --cors-origins entry that is no origin never matches; a
--host that cannot be listened on. A flag given wins over its twin, which
is then not read: a bad value there is no reason to exit."""
import os
import subprocess

import pytest

from attnd_proc import BIN, Attnd, events

# The suite may run with every Attnd over TLS (ATTND_E2E_TLS=1); these runs
# must see only the variables each case sets.
CLEAN = {k: v for k, v in os.environ.items() if not k.startswith("ATTND_") or k in (
    "ATTND_BIN", "ATTND_E2E_RECORD", "ATTND_E2E_TLS")}


def run_bin(*args, env=None, timeout=30):
    full = dict(CLEAN)
    full.update(env or {})
    p = subprocess.run([BIN, "--port", "0", *args], capture_output=True, text=True,
                       env=full, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


@pytest.mark.parametrize("args,env,needle", [
    (["--api-key", ""], {}, "--api-key (empty)"),
    (["--api-key="], {}, "--api-key (empty)"),
    ([], {"ATTND_API_KEY": ""}, "ATTND_API_KEY (empty)"),
    ([], {"ATTND_API_KEY_FILE": ""}, "ATTND_API_KEY_FILE (empty)"),
    (["--api-key-file", ""], {}, "--api-key-file (empty)"),
    (["--tls-cert=", "--tls-key="], {}, "--tls-cert (empty)"),
    ([], {"ATTND_TLS_CERT": "", "ATTND_TLS_KEY": ""}, "ATTND_TLS_CERT (empty)"),
    ([], {"ATTND_TLS_KEY": ""}, "ATTND_TLS_KEY (empty)"),
])
def test_an_empty_secret_or_certificate_setting_exits_2(args, env, needle):
    code, out = run_bin(*args, env=env)
    assert code == 2, (args, env, code, out)
    assert needle in out and "non-empty" in out, out
    assert '"auth":"off"' not in out and "listening" not in out, out


@pytest.mark.parametrize("args,env,needle", [
    (["--state-dir", ""], {}, "invalid --state-dir ''"),
    ([], {"ATTND_STATE_DIR": ""}, "invalid value of ATTND_STATE_DIR ''"),
])
def test_an_empty_state_dir_exits_2(args, env, needle):
    """An empty --state-dir (the image sets ATTND_STATE_DIR; an empty
    override is a slip) would have kept no session across a restart and
    said so only as "state_dir":"-" in the listening line."""
    code, out = run_bin(*args, env=env)
    assert code == 2, (args, env, code, out)
    assert needle in out and "expected a directory" in out, out
    assert "listening" not in out, out


@pytest.mark.parametrize("args,env,needle", [
    (["--port-file", ""], {}, "invalid --port-file ''"),
    (["--log-file="], {}, "invalid --log-file ''"),
    ([], {"ATTND_PORT_FILE": ""}, "invalid value of ATTND_PORT_FILE ''"),
    ([], {"ATTND_LOG_FILE": ""}, "invalid value of ATTND_LOG_FILE ''"),
])
def test_an_empty_port_or_log_file_exits_2(args, env, needle):
    """An empty --port-file (an unset shell variable) started attnd and
    wrote no port file, so a script waiting for it waited forever; an empty
    --log-file logged to stdout."""
    code, out = run_bin(*args, env=env)
    assert code == 2, (args, env, code, out)
    assert needle in out and "expected a file name" in out, out
    assert "listening" not in out, out


def test_an_api_key_is_never_echoed_in_the_message():
    code, out = run_bin("--api-key", "k" * 600)      # too long for the field
    assert code == 2 and "k" * 20 not in out, out


@pytest.mark.parametrize("rid", ["a b", "r1.x", "r1.x/..?#", "pod 1", "ü", "x" * 64])
def test_a_replica_id_outside_the_id_alphabet_exits_2(rid):
    for args, env, where in ((["--replica-id", rid], {}, "--replica-id"),
                             ([], {"ATTND_REPLICA_ID": rid}, "ATTND_REPLICA_ID")):
        code, out = run_bin(*args, env=env)
        assert code == 2, (rid, code, out)
        assert where in out and "letters, digits, '-' or '_'" in out, out


def test_a_replica_id_of_the_alphabet_prefixes_ids_with_a_dot():
    with Attnd("--replica-id", "pod_1-a") as a:
        r = a.post("/v1/sessions", {"d_k": 2, "d_v": 2})
        assert r.status == 201, r
        assert r.json()["id"].startswith("pod_1-a."), r.json()
    with Attnd("--replica-id", "r1-") as a:     # a separator at the end: still '.'
        assert a.post("/v1/sessions", {"d_k": 2, "d_v": 2}).json()["id"].startswith("r1-.")


@pytest.mark.parametrize("value,needle", [
    ("http://127.0.0.1:21438/", "no path or trailing slash"),
    ("https://app.example.com/page", "no path or trailing slash"),
    ("app.example.com", "not an origin"),
    ("https://App.example.com", "not an origin"),
    ("HTTPS://app.example.com", "not an origin"),
    ("https://", "not an origin"),
    ("https://a.example:0", "not an origin"),
    ("https://a.example:99999", "not an origin"),
    ("https://a.example:", "not an origin"),
    ("https://a.example:443", "default port"),
    ("http://a.example:80", "default port"),
    ("https://ok.example, null", "not an origin"),
    ("https://ok.example,*/", "not an origin"),
])
def test_a_cors_entry_that_is_no_origin_exits_2(value, needle):
    code, out = run_bin("--cors-origins", value)
    assert code == 2, (value, code, out)
    assert "--cors-origins" in out and needle in out, out
    code, out = run_bin(env={"ATTND_CORS_ORIGINS": value})
    assert code == 2 and "ATTND_CORS_ORIGINS" in out, out


def test_origins_and_star_are_accepted():
    good = "https://app.example.com, http://127.0.0.1:21438,http://[::1]:8000,*"
    with Attnd("--cors-origins", good) as a:
        r = a.request("OPTIONS", "/v1/attention",
                      headers={"Origin": "http://127.0.0.1:21438",
                               "Access-Control-Request-Method": "POST"})
        assert r.status == 204
        assert r.headers.get("access-control-allow-origin") == "http://127.0.0.1:21438"


@pytest.mark.parametrize("host", ["999.1.1.1", "example.invalid", "192.0.2.1"])
def test_a_host_that_cannot_be_listened_on_exits_2(host):
    code, out = run_bin("--host", host)
    assert code == 2, (host, code, out)
    assert host in out and "--host" in out, out


@pytest.mark.parametrize("env,args", [
    ({"ATTND_PORT": "abc"}, []),                        # Attnd gives --port 0
    ({"ATTND_LOG_FORMAT": "xml"}, ["--log-format", "json"]),
    ({"ATTND_MAX_ELEMENTS": "lots"}, ["--max-elements=100"]),
    ({"ATTND_API_KEY": ""}, ["--api-key", "a-key-of-the-flag"]),
], ids=["port", "log_format", "max_elements", "empty_api_key"])
def test_a_flag_wins_over_its_twin_even_a_bad_one(env, args):
    # README: "a flag wins over its twin": the twin is not read at all
    with Attnd(*args, env=env) as a:
        assert a.get("/healthz").status == 200
        if "--max-elements=100" in args:
            assert a.get("/v1/info").json()["limits"]["max_elements"] == 100
        if "--api-key" in args:
            assert a.get("/v1/info").status == 401
            ok = a.get("/v1/info", headers={"Authorization": "Bearer a-key-of-the-flag"})
            assert ok.status == 200


def test_a_bad_twin_without_its_flag_still_exits_2():
    code, out = run_bin("--log-format", "json", env={"ATTND_MAX_ELEMENTS": "lots"})
    assert code == 2 and "ATTND_MAX_ELEMENTS" in out, out


@pytest.mark.parametrize("flag,needle", [("--help", "ATTND_MAX_BODY_BYTES"), ("-h", "usage:"),
                                         ("--version", "attnd ")])
def test_help_and_version_answer_despite_a_bad_twin(flag, needle):
    """The message of a bad twin ends "Try 'attnd --help'": that must
    then print the help, not the same message again."""
    env = dict(CLEAN, ATTND_PORT="abc", ATTND_API_KEY="")
    p = subprocess.run([BIN, flag], capture_output=True, text=True, env=env, timeout=30)
    assert p.returncode == 0 and needle in p.stdout, (p.returncode, p.stdout, p.stderr)
    assert "ATTND_PORT" not in p.stderr, p.stderr
    # as a flag's value it is no request for help: the twins are read
    code, out = run_bin("--port-file", "--help", env={"ATTND_MAX_ELEMENTS": "lots"})
    assert code == 2 and "ATTND_MAX_ELEMENTS" in out, out


@pytest.mark.parametrize("key,needle", [
    ("s3cret\n", "whitespace (a space, tab or line break) at character 7"),
    ("s3 cret", "whitespace (a space, tab or line break) at character 3"),
    (" s3cret", "whitespace (a space, tab or line break) at character 1"),
    ("s3cr\u00e9t", "another byte at character 5"),
    ("k" * 600, "600 characters, at most 511"),
], ids=["newline", "space", "leading_space", "non_ascii", "too_long"])
def test_an_api_key_no_bearer_token_can_match_exits_2(key, needle):
    """A token is printable ASCII without spaces and the whitespace around
    it is not part of it: such a key (a Kubernetes Secret made from a file
    that ends in a newline) started attnd with every request 401. The
    message says what is wrong without echoing the key."""
    for args, env, where in ((["--api-key", key], {}, "invalid --api-key:"),
                             ([], {"ATTND_API_KEY": key}, "invalid value of ATTND_API_KEY:")):
        code, out = run_bin(*args, env=env)
        assert code == 2, (key, code, out)
        assert where in out and needle in out, out
        assert "s3" not in out and "k" * 20 not in out and "listening" not in out, out


def test_a_long_file_setting_says_how_long_it_may_be():
    code, out = run_bin("--tls-cert", "/" + "c" * 1100, "--tls-key", "/k")
    assert code == 2 and "invalid --tls-cert: 1101 characters, at most 1023" in out, out
    assert "non-empty" not in out, out


@pytest.mark.parametrize("value", ["0x10", "0x1p4", "0X1E", "1.5x", "10s", "1e400", "nan"])
def test_a_number_of_seconds_is_decimal(value):
    """strtod reads hexadecimal too: --drain-timeout 0x10 ran with 16 s."""
    for flag in ("--drain-timeout", "--request-timeout", "--rate-limit"):
        code, out = run_bin(flag, value, "--version")
        assert code == 2 and f"invalid {flag} '{value}'" in out, (flag, value, code, out)


@pytest.mark.parametrize("value", ["1.5", ".5", "2e1", "1E+1", "0"])
def test_decimal_numbers_of_seconds_are_taken(value):
    code, out = run_bin("--drain-timeout", value, "--version")
    assert code == 0 and out.startswith("attnd "), (value, code, out)


def test_a_misspelt_twin_is_warned_of_and_others_are_left_alone():
    """An ATTND_* variable that is no setting would be ignored without a
    word: one within a typo of a twin (a letter off, two swapped, another
    case) is warned of by name with the twin it is nearest to; one that is
    not (the shipped nginx's ATTND_POOL, a harness's ATTND_BIN) is not."""
    env = {"ATTND_MAX_BODY_BYTE": "1k", "attnd_workers": "1", "ATTND_KERENL": "none",
           "ATTND_POOL": "attnd-pool:8080", "ATTND_HOST_PREFIX": "attnd-"}
    with Attnd(env=env) as a:
        warned = sorted(e["msg"] for e in events(a) if e["level"] == "warn")
        info = a.get("/v1/info").json()
    assert warned == [
        "ATTND_KERENL is not a setting of attnd and is ignored; did you mean ATTND_KERNEL?",
        "ATTND_MAX_BODY_BYTE is not a setting of attnd and is ignored; "
        "did you mean ATTND_MAX_BODY_BYTES?",
        "attnd_workers is not a setting of attnd and is ignored; did you mean ATTND_WORKERS?",
    ], warned
    assert info["limits"]["max_body_bytes"] == 64 << 20, info["limits"]   # still the default


def test_a_control_byte_in_a_name_stays_on_its_log_line():
    """The text log wrote event messages unescaped: a newline in a misspelt
    variable's name split its warning over two lines, the second of which
    a reader would take for a line of its own."""
    env = {"ATTND_WORKE\nS": "1"}      # one letter off ATTND_WORKERS
    with Attnd("--log-format", "text", env=env) as a:
        assert a.get("/healthz").status == 200
        a.stop()
        text = a.logs()
    warned = [x for x in text.splitlines() if " warn " in x]
    assert len(warned) == 1, text
    assert "ATTND_WORKE\\u000aS is not a setting" in warned[0], warned
    assert not any(x.startswith("S is not") for x in text.splitlines()), text


def test_the_twins_themselves_warn_of_nothing():
    env = {"ATTND_MAX_ELEMENTS": "1000", "ATTND_WORKERS": "1", "ATTND_KERNEL": "none"}
    with Attnd(env=env) as a:
        assert a.get("/healthz").status == 200
        assert [e for e in events(a) if e["level"] == "warn"] == []


@pytest.mark.parametrize("args,needle", [
    (["--max-elements", "0"], "expected an integer (k/m/g suffix allowed) in [1, 1000000000000000]"),
    (["--max-tokens", "0"], "expected an integer (k/m/g suffix allowed) in [1, 1000000000000]"),
    (["--max-sessions", "-1"], "expected an integer (k/m/g suffix allowed) in [1, 1000000000]"),
    (["--max-body-bytes", "5g"], "expected an integer (k/m/g suffix allowed) in [1, 4294967296]"),
])
def test_a_size_out_of_range_names_its_bounds_as_integers(args, needle):
    """A size's bounds were printed with %.15g: --max-elements 0 said
    "expected a non-negative integer ... in [1, 1e+15]"."""
    code, out = run_bin(*args, "--version")
    assert code == 2 and needle in out, (args, code, out)
    assert "e+" not in out and "non-negative" not in out, out


@pytest.mark.parametrize("args,needle", [
    (["--max-sessions", "0"], "invalid --max-sessions '0': expected an integer"),
    (["--max-cache-bytes", "0"], "invalid --max-cache-bytes '0': expected an integer"),
])
def test_a_zero_session_limit_is_refused(args, needle):
    """--max-sessions 0 and --max-cache-bytes 0 were taken and lifted the
    limit (the store reads 0 as none): any number of sessions and cache
    bytes, and no cgroup memory warning, from a value a user may write to
    mean "no sessions". Memory stays bounded: 0 exits 2 like a bad value."""
    code, out = run_bin(*args, "--version")
    assert code == 2 and needle in out and "in [1, " in out, (args, code, out)

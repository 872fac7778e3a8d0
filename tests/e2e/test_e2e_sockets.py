"""tests/e2e/test_e2e_sockets.py — what attnd asks the kernel for on each
accepted connection (server/tcp.c), read back from the kernel with `ss`:

- the receive buffer of --socket-rcvbuf (the kernel shows twice the value
  asked), where net.core.rmem_max allows it, else the kernel's own, with
  an info line at start-up saying so; 0 leaves the kernel's own;
- the congestion control of --loopback-congestion for a client on
  127.0.0.1: auto gives cubic or reno (never a pacing one), a name gives
  that one, '' and a name the kernel refuses (with a warning) the system's;
- a client that is not on 127.0.0.0/8 keeping the system's congestion
  control, whatever the flag.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import time

import pytest

from attnd_proc import Attnd, suite_wrap

pytestmark = pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")


def sysctl(name):
    with open("/proc/sys/" + name.replace(".", "/")) as f:
        return f.read().split()


SYSTEM_CC = sysctl("net.ipv4.tcp_congestion_control")[0]
RMEM_MAX = int(sysctl("net.core.rmem_max")[0])
RMEM_DEFAULT = int(sysctl("net.ipv4.tcp_rmem")[1])


def server_side(port, peer_port):
    """(receive buffer, congestion control) of attnd's end of the
    connection whose client end is peer_port, as ss shows them."""
    deadline = time.time() + 5
    while time.time() < deadline:
        out = subprocess.run(["ss", "-tmin", "state", "established",
                              "( sport = :%d and dport = :%d )" % (port, peer_port)],
                             capture_output=True, text=True, timeout=10).stdout
        m = re.search(r"skmem:\([^)]*\brb(\d+)[^)]*\)\s+(\S+)", out)
        if m:
            return int(m.group(1)), m.group(2)
        time.sleep(0.05)
    raise AssertionError("ss shows no such connection:\n" + out)


def settings(a, host="127.0.0.1"):
    """A connection to a (from host), answered once, and attnd's settings of it."""
    # (TLS: the certificate names 127.0.0.1, whichever address is used)
    s = suite_wrap(socket.create_connection((host, a.port), timeout=10))
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        return server_side(a.port, s.getsockname()[1])
    finally:
        s.close()


def log_lines(a, needle):
    """(level, message) of attnd's log lines whose message holds needle."""
    out = []
    for line in a.logs().splitlines():
        rec = json.loads(line)
        if needle in rec.get("msg", ""):
            out.append((rec["level"], rec["msg"]))
    return out


@pytest.mark.parametrize("asked", [2 << 20, 1 << 20, 300 << 10])
def test_receive_buffer_is_the_one_asked_where_rmem_max_allows(asked):
    with Attnd("--socket-rcvbuf", str(asked)) as a:
        rb, _ = settings(a)
        if asked <= RMEM_MAX:
            assert rb == 2 * asked, (rb, asked)
            assert log_lines(a, "--socket-rcvbuf") == []
        else:
            assert rb != 2 * RMEM_MAX, "a capped buffer was set"
            assert [lv for lv, _ in log_lines(a, "above net.core.rmem_max")] == ["info"]


def test_receive_buffer_zero_leaves_the_kernels():
    with Attnd("--socket-rcvbuf", "0") as a:
        rb, _ = settings(a)
        assert rb == RMEM_DEFAULT, rb


@pytest.mark.parametrize("over", ["just", "half", "twice"])
def test_receive_buffer_above_rmem_max_is_not_set_and_said(over):
    """Between rmem_max and twice it too: the kernel reads back twice what
    it kept, so a buffer capped there reads back as at least the value
    asked, and must not be taken for one set whole."""
    asked = {"just": RMEM_MAX + 4096, "half": RMEM_MAX + RMEM_MAX // 2,
             "twice": 2 * RMEM_MAX + 4096}[over]
    with Attnd("--socket-rcvbuf", str(asked)) as a:
        rb, _ = settings(a)
        assert rb == RMEM_DEFAULT, rb
        assert [lv for lv, _ in log_lines(a, "above net.core.rmem_max")] == ["info"]
        assert a.get("/healthz").status == 200


def test_loopback_client_gets_a_congestion_control_that_does_not_pace():
    with Attnd() as a:
        _, cc = settings(a)
        assert cc in ("cubic", "reno"), cc
        assert log_lines(a, "tcp:") == []


def test_loopback_congestion_by_name_and_off():
    with Attnd("--loopback-congestion", "reno") as a:
        assert settings(a)[1] == "reno"
    with Attnd("--loopback-congestion", "") as a:
        assert settings(a)[1] == SYSTEM_CC


def test_unknown_congestion_control_is_warned_and_the_systems_kept():
    with Attnd("--loopback-congestion", "nosuchcc") as a:
        assert settings(a)[1] == SYSTEM_CC
        assert [lv for lv, _ in log_lines(a, "--loopback-congestion nosuchcc")] == ["warn"]


def local_address():
    """This host's address that is not on loopback, or None."""
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.connect(("192.0.2.1", 9))         # no packet is sent
        ip = u.getsockname()[0]
    except OSError:
        return None
    finally:
        u.close()
    return None if ip.startswith("127.") else ip


def test_client_off_loopback_keeps_the_systems_congestion_control():
    ip = local_address()
    if ip is None:
        pytest.skip("this host has no address off loopback")
    with Attnd("--host", "0.0.0.0", "--loopback-congestion", "reno") as a:
        assert settings(a, ip)[1] == SYSTEM_CC
        assert settings(a)[1] == "reno"
    assert os.path.exists("/proc/sys/net/ipv4/tcp_congestion_control")

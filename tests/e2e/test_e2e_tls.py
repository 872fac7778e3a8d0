"""HTTPS: --tls-cert/--tls-key served through libmicrohttpd's GnuTLS support.

Certificates are made here with the openssl command line (a CA, a server
certificate it signs for 127.0.0.1, a second CA and pair for rotation, an
expired one). curl checks the chain as a client would (--cacert); the other
checks use Python's ssl module. SIGHUP must swap the pair for new
connections while a connection opened before it keeps working.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import time

import pytest

from attnd_proc import Attnd, BIN, make_ca, make_cert, read_to_close

VALID = {"q": [[1, 0]], "k": [[1, 0], [0, 1]], "v": [[1, 2], [3, 4]]}


@pytest.fixture(scope="module")
def pki():
    d = tempfile.mkdtemp(prefix="attnd-tls-")
    ca = make_ca(d, "ca")
    other = make_ca(d, "other-ca")
    yield {
        "dir": d,
        "ca": ca,
        "other_ca": other,
        "one": make_cert(d, "one", ca, "attnd one"),
        "two": make_cert(d, "two", other, "attnd two"),
        "expired": make_cert(d, "expired", ca, "attnd expired", days=-1),
    }
    shutil.rmtree(d, ignore_errors=True)


def curl(url, *args):
    return subprocess.run(["curl", "-sS", "--max-time", "10", *args, url],
                          capture_output=True, text=True)


def tls_flags(pair):
    return ["--tls-cert", pair[0], "--tls-key", pair[1]]


def ctx_for(ca, minimum=None, maximum=None):
    c = ssl.create_default_context(cafile=ca)
    if minimum:
        c.minimum_version = minimum
    if maximum:
        c.maximum_version = maximum
    return c


def peer_subject(port, ca):
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    with ctx_for(ca).wrap_socket(raw, server_hostname="127.0.0.1") as s:
        return dict(x[0] for x in s.getpeercert()["subject"])["commonName"]


def test_curl_with_the_ca_and_a_wrong_ca(pki):
    with Attnd(*tls_flags(pki["one"]), ca=pki["ca"]) as a:
        url = f"https://127.0.0.1:{a.port}"
        ok = curl(url + "/v1/attention", "--cacert", pki["ca"], "-H",
                  "Content-Type: application/json", "-d", json.dumps(VALID))
        assert ok.returncode == 0, ok.stderr
        assert "output" in json.loads(ok.stdout)
        bad = curl(url + "/healthz", "--cacert", pki["other_ca"])
        assert bad.returncode == 60, (bad.returncode, bad.stderr)   # peer not verified
        plain = curl(f"http://127.0.0.1:{a.port}/healthz")
        assert plain.returncode != 0 or "ok" not in plain.stdout
        assert a.get("/healthz").status == 200      # still serving after both


def test_only_tls_12_and_13(pki):
    with Attnd(*tls_flags(pki["one"]), ca=pki["ca"]) as a:
        for version, ok in ((ssl.TLSVersion.TLSv1_2, True), (ssl.TLSVersion.TLSv1_3, True)):
            c = ctx_for(pki["ca"], version, version)
            with c.wrap_socket(socket.create_connection(("127.0.0.1", a.port), timeout=10),
                               server_hostname="127.0.0.1") as s:
                assert s.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2",
                                       ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
                cipher = s.cipher()[0]
                assert "GCM" in cipher or "CHACHA20" in cipher, cipher
        # refused with the alert that says why (server/tls_alerts.c)
        old = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{a.port}",
                              "-tls1_1", "-cipher", "DEFAULT:@SECLEVEL=0"],
                             input="", capture_output=True, text=True, timeout=20)
        assert old.returncode != 0 and "alert protocol version" in old.stderr, \
            old.stderr[-500:]
        cbc = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{a.port}",
                              "-tls1_2", "-cipher", "ECDHE-RSA-AES128-SHA:ECDHE-ECDSA-AES128-SHA"],
                             input="", capture_output=True, text=True, timeout=20)
        assert cbc.returncode != 0 and "alert handshake failure" in cbc.stderr, \
            cbc.stderr[-500:]
        assert a.get("/healthz").status == 200


def _client_hello(version):
    """A ClientHello record of the given protocol version (0x0301: TLS 1.0,
    0x0302: TLS 1.1) offering ECDHE and RSA suites, no extensions: what an
    old client sends, whatever this machine's OpenSSL would still send."""
    suites = (0xc02f, 0xc013, 0xc014, 0x002f, 0x0035)
    body = struct.pack(">H", version) + os.urandom(32) + b"\x00"
    body += struct.pack(">H", 2 * len(suites)) + b"".join(struct.pack(">H", x) for x in suites)
    body += b"\x01\x00"                          # compression: null only
    hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16" + struct.pack(">HH", 0x0301, len(hs)) + hs


def test_tls_10_and_11_hellos_get_the_protocol_version_alert(pki):
    """The answer to a TLS 1.0 or 1.1 ClientHello is one fatal alert record,
    protocol_version (70), then the close: not a bare close."""
    with Attnd(*tls_flags(pki["one"]), ca=pki["ca"]) as a:
        for version in (0x0301, 0x0302):
            s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
            s.sendall(_client_hello(version))
            data = read_to_close(s)
            s.close()
            assert len(data) == 7, data.hex()
            kind, _, length, level, what = struct.unpack(">BHHBB", data)
            assert (kind, length, level, what) == (0x15, 2, 2, 70), data.hex()
        assert a.get("/healthz").status == 200


def test_client_renegotiation_is_refused_with_an_alert(pki):
    """TLS 1.2: a client's renegotiation gets the no_renegotiation alert
    (openssl exits 1 and names it), every time, not a silent hang-up that
    a client cannot tell from a network failure; TLS 1.3 key updates keep
    the connection usable."""
    with Attnd(*tls_flags(pki["one"]), ca=pki["ca"]) as a:
        for _ in range(3):
            p = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{a.port}",
                                "-tls1_2", "-CAfile", pki["ca"]],
                               input="R\n", capture_output=True, text=True, timeout=20)
            assert "RENEGOTIATING" in p.stderr, p.stderr[-800:]
            assert p.returncode == 1, (p.returncode, p.stdout[-400:], p.stderr[-800:])
            assert "no renegotiation" in p.stderr, p.stderr[-800:]
        # s_client takes its command letters only without -ign_eof, and only
        # as a line of their own, so the request follows the K after a pause
        # and stdin stays open until the answer is in.
        k = subprocess.Popen(["openssl", "s_client", "-connect", f"127.0.0.1:{a.port}",
                              "-tls1_3", "-CAfile", pki["ca"]], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        k.stdin.write("K\n")
        k.stdin.flush()
        time.sleep(0.5)
        k.stdin.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        k.stdin.flush()
        time.sleep(1.0)
        out, _ = k.communicate(timeout=20)
        assert "KEYUPDATE" in out and "HTTP/1.1 200" in out, out[-800:]
        assert a.get("/healthz").status == 200


def test_sighup_rotates_the_pair_and_keeps_connections(pki):
    d = os.path.join(pki["dir"], "rotated")
    os.mkdir(d)
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")

    def install(pair):
        for src, dst in zip(pair, (cert, key)):
            with open(src, "rb") as f, open(dst + ".tmp", "wb") as g:
                g.write(f.read())
            os.chmod(dst + ".tmp", 0o600)
            os.replace(dst + ".tmp", dst)

    install(pki["one"])
    with Attnd("--tls-cert", cert, "--tls-key", key, ca=pki["ca"]) as a:
        held = http.client.HTTPSConnection("127.0.0.1", a.port, timeout=10,
                                           context=ctx_for(pki["ca"]))
        held.request("GET", "/healthz")
        assert held.getresponse().read() == b'{"status":"ok"}'
        assert peer_subject(a.port, pki["ca"]) == "attnd one"
        install(pki["two"])
        a.signal(signal.SIGHUP)
        deadline = time.time() + 10
        while "TLS certificate and key reloaded" not in a.logs() and time.time() < deadline:
            time.sleep(0.05)
        assert peer_subject(a.port, pki["other_ca"]) == "attnd two"
        held.request("GET", "/healthz")             # the old connection still works
        assert held.getresponse().read() == b'{"status":"ok"}'
        # A broken pair on reload: the old one stays, the log says why.
        with open(cert, "w") as f:
            f.write("not a certificate\n")
        a.signal(signal.SIGHUP)
        deadline = time.time() + 10
        while "TLS reload failed" not in a.logs() and time.time() < deadline:
            time.sleep(0.05)
        assert "not a PEM certificate chain" in a.logs()
        assert peer_subject(a.port, pki["other_ca"]) == "attnd two"
        held.close()


def start_fails(*flags):
    p = subprocess.run([BIN, "--port", "0", *flags], capture_output=True, text=True, timeout=20)
    return p.returncode, p.stdout + p.stderr


def test_unusable_material_exits_2(pki):
    d = pki["dir"]
    cert, key = pki["one"]
    junk = os.path.join(d, "junk.pem")
    with open(junk, "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    os.chmod(junk, 0o600)
    open_key = os.path.join(d, "open-key.pem")
    with open(key, "rb") as f, open(open_key, "wb") as g:
        g.write(f.read())
    os.chmod(open_key, 0o644)
    cases = [
        (["--tls-cert", os.path.join(d, "missing.pem"), "--tls-key", key], "cannot read"),
        (["--tls-cert", junk, "--tls-key", key], "not a PEM certificate"),
        (["--tls-cert", cert, "--tls-key", junk], "not a PEM private key"),
        (["--tls-cert", cert, "--tls-key", pki["two"][1]], "--tls-cert/--tls-key"),
        (["--tls-cert", cert, "--tls-key", open_key], "mode 0644 lets other users read it"),
        (["--tls-cert", cert], "go together"),
    ]
    for flags, words in cases:
        code, out = start_fails(*flags)
        assert code == 2, (flags, code, out)
        assert words in out, (flags, out)


def test_a_group_readable_key_is_silent_a_world_readable_one_names_defaultmode(pki):
    """A Secret mounted with defaultMode: 0440 (the pod's fsGroup reads it)
    starts without a warning; the 0644 Kubernetes gives by default is
    refused with both fixes named."""
    d = pki["dir"]
    cert, key = pki["one"]
    for mode in (0o440, 0o644):
        path = os.path.join(d, "key-%o.pem" % mode)
        with open(key, "rb") as f, open(path, "wb") as g:
            g.write(f.read())
        os.chmod(path, mode)
    with Attnd("--tls-cert", cert, "--tls-key", os.path.join(d, "key-440.pem")) as a:
        logs = a.logs()
        assert "group" not in logs and '"level":"warn"' not in logs, logs
    code, out = start_fails("--tls-cert", cert, "--tls-key", os.path.join(d, "key-644.pem"))
    assert code == 2, out
    assert "chmod 600 (or 640) it" in out and "defaultMode: 0440" in out, out


def test_expired_certificate_is_logged(pki):
    with Attnd(*tls_flags(pki["expired"])) as a:
        assert "certificate expired on" in a.logs()
        bad = curl(f"https://127.0.0.1:{a.port}/healthz", "--cacert", pki["ca"])
        assert bad.returncode == 60, bad.stderr     # clients refuse it, as logged


def test_info_and_log_say_tls(pki):
    with Attnd(*tls_flags(pki["one"]), ca=pki["ca"]) as a:
        assert '"tls":"on"' in a.logs()


def test_failed_handshakes_are_logged_a_line_a_second(pki):
    """A TCP health check that connects and closes, or plain HTTP to the
    HTTPS port, fails its handshake: the log says so at most once a second
    with the count since, as it does for the connection caps' refusals."""
    with Attnd(*tls_flags(pki["one"]), ca=pki["ca"]) as a:
        t0 = time.monotonic()
        for i in range(30):
            s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
            if i % 2:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                s.settimeout(10)
                try:
                    s.recv(100)
                except OSError:
                    pass
            s.close()
        spent = time.monotonic() - t0
        assert a.get("/healthz").status == 200        # still serving, over TLS
        time.sleep(1.1)
        for _ in range(3):                            # the count of the quiet second
            socket.create_connection(("127.0.0.1", a.port), timeout=10).close()
        deadline = time.monotonic() + 10
        while a.logs().count("a TLS handshake failed") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        lines = [l for l in a.logs().splitlines() if "handshake" in l]
        assert all("a TLS handshake failed" in l for l in lines), lines
        assert 2 <= len(lines) <= 2 + int(spent) + 1, lines
        assert "more failed since the last such line" in lines[-1], lines
        more = sum(int(re.search(r"; (\d+) more failed", l).group(1)) for l in lines)
        assert more + len(lines) >= 30, lines        # every failure counted

"""tests/e2e/dns_stub.py — a DNS server on a loopback UDP port for the nginx
tests (nginx's `resolver` takes address:port).

DnsStub() answers A queries from a table the test changes as it goes: a
replica that is down has no name (NXDOMAIN, as Docker's DNS and a headless
Service answer for a stopped container or a pod that is not ready), a
recreated one answers with its new address, a pool name with every
replica's. It records every name it is asked (asked), so a test can see
which hosts nginx tried to reach.

Hand-written on the standard library: the suite installs no PyPI packages,
and nginx's resolver (ipv6=off) needs only one question per UDP query and A
records in the answer, a few dozen lines. A query it cannot parse gets no
answer (nginx then times out, as with a dead server).
"""
import socket
import struct
import threading

TYPE_A = 1
CLASS_IN = 1
NXDOMAIN = 3


class DnsStub:
    def __init__(self):
        self.records = {}                   # lower-case name -> [IPv4, ...]
        self.asked = []                     # every queried name, in order
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)           # so that close() ends the thread
        self.port = self.sock.getsockname()[1]
        self.closed = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def address(self):
        """What nginx's `resolver` directive takes."""
        return f"127.0.0.1:{self.port}"

    def set(self, name, *addrs):
        """name answers addrs from now on; with none, NXDOMAIN."""
        with self.lock:
            if addrs:
                self.records[name.lower()] = list(addrs)
            else:
                self.records.pop(name.lower(), None)

    def names_asked(self):
        with self.lock:
            return set(self.asked)

    def close(self):
        self.closed = True
        self.thread.join(timeout=5)
        self.sock.close()

    def _serve(self):
        while not self.closed:
            try:
                query, peer = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            reply = self._answer(query)
            if reply:
                self.sock.sendto(reply, peer)

    def _answer(self, query):
        """The reply to one query (bytes), or None to stay silent."""
        if len(query) < 12:
            return None
        qid, flags, qdcount = struct.unpack(">HHH", query[:6])
        if flags & 0x8000 or qdcount != 1:          # a response, or not one question
            return None
        labels, i = [], 12
        while i < len(query) and query[i]:
            n = query[i]
            if n > 63:                              # a compression pointer: not in questions
                return None
            labels.append(query[i + 1:i + 1 + n].decode("ascii", "replace"))
            i += 1 + n
        if i + 5 > len(query):
            return None
        qtype, qclass = struct.unpack(">HH", query[i + 1:i + 5])
        name = ".".join(labels).lower()
        with self.lock:
            self.asked.append(name)
            addrs = self.records.get(name)
        answers = addrs if addrs and qtype == TYPE_A and qclass == CLASS_IN else []
        rcode = 0 if addrs else NXDOMAIN
        # QR, AA, RD as asked, RA; one question, len(answers) answers
        head = struct.pack(">HHHHHH", qid, 0x8480 | (flags & 0x0100) | rcode, 1,
                           len(answers), 0, 0)
        body = query[12:i + 5]
        for a in answers:                           # name: a pointer to the question's
            body += b"\xc0\x0c" + struct.pack(">HHIH", TYPE_A, CLASS_IN, 1, 4) + \
                socket.inet_aton(a)
        return head + body

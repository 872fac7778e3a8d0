"""tests/e2e/dns_stub.py — a DNS server on a loopback UDP port for the nginx
tests (nginx's `resolver` takes address:port).

DnsStub() answers A queries from a table the test changes as it goes: a
replica that is down has no name (NXDOMAIN, as Docker's DNS and a headless
Service answer for a stopped container or a pod that is not ready), a
recreated one answers with its new address, a pool name with every
replica's. It records every name it is asked (asked), so a test can see
which hosts nginx tried to reach.

Messages are parsed and built with dnspython (Debian's python3-dnspython);
a query it cannot parse gets no answer (nginx then times out, as with a
dead server).
"""
import socket
import threading

import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset


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

    def _answer(self, wire):
        """The reply to one query (bytes), or None to stay silent."""
        try:
            query = dns.message.from_wire(wire)
        except dns.exception.DNSException:
            return None
        if query.flags & dns.flags.QR or len(query.question) != 1:
            return None                             # a response, or not one question
        q = query.question[0]
        name = q.name.to_text(omit_final_dot=True).lower()
        with self.lock:
            self.asked.append(name)
            addrs = self.records.get(name)
        reply = dns.message.make_response(query, recursion_available=True)
        reply.flags |= dns.flags.AA
        if not addrs:
            reply.set_rcode(dns.rcode.NXDOMAIN)
        elif q.rdtype == dns.rdatatype.A and q.rdclass == dns.rdataclass.IN:
            reply.answer.append(dns.rrset.from_text_list(q.name, 1, "IN", "A", addrs))
        return reply.to_wire()

"""tests/e2e/test_e2e_sessions_concurrency.py — many clients on one session.

- Clients append to one session at once: the final length is the sum of the
  accepted appends, every row is intact (no interleaving inside an append),
  and each client's rows keep their order.
- Readers (attention, GET kv) running meanwhile never see half an append.
- Deletes racing appends: each append answers 200 (landed before) or 404,
  never a 5xx, and the daemon stays healthy.
"""
import threading

from attnd_proc import Attnd

D = 3
CLIENTS = 8
APPENDS = 12


def _rows(tag0, m):
    return [[float(tag0 + r)] * D for r in range(m)]


def test_many_clients_append_to_one_session():
    with Attnd("--workers", "4") as d:
        sid = d.post("/v1/sessions", {"d_k": D, "d_v": D}).json()["id"]
        accepted = [0] * CLIENTS
        errors = []
        torn = []

        def client(t):
            seq = 0
            for i in range(APPENDS):
                m = 1 + i % 3
                tag = t * 100000 + seq
                k = _rows(tag, m)
                v = [[-x for x in row] for row in k]
                r = d.post(f"/v1/sessions/{sid}/kv", {"k": k, "v": v})
                if r.status == 200:
                    seq += m
                    accepted[t] += m
                else:
                    errors.append(r)

        def reader():
            for _ in range(15):
                r = d.get(f"/v1/sessions/{sid}/kv")
                if r.status != 200:
                    errors.append(r)
                    continue
                j = r.json()
                if len(j["k"]) != j["length"] or len(j["v"]) != j["length"]:
                    torn.append(j["length"])
                # each append's rows are consecutive tags of one client
                for row in j["k"]:
                    if len(set(row)) != 1:
                        torn.append(row)
                a = d.post(f"/v1/sessions/{sid}/attention", {"q": [[1.0] * D]})
                if a.status not in (200, 422):      # 422 only while still empty
                    errors.append(a)

        threads = [threading.Thread(target=client, args=(t,)) for t in range(CLIENTS)]
        threads += [threading.Thread(target=reader) for _ in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors[:3]
        assert not torn, torn[:3]

        j = d.get(f"/v1/sessions/{sid}/kv").json()
        total = sum(accepted)
        assert total == CLIENTS * (APPENDS // 3) * 6
        assert j["length"] == total and len(j["k"]) == total
        nxt = [0] * CLIENTS
        for krow, vrow in zip(j["k"], j["v"]):
            tag = krow[0]
            assert krow == [tag] * D and vrow == [-tag] * D, (krow, vrow)
            t, seq = int(tag) // 100000, int(tag) % 100000
            assert seq == nxt[t], f"client {t}: row {seq} out of order (expected {nxt[t]})"
            nxt[t] += 1
        assert nxt == accepted


def test_deletes_racing_appends():
    with Attnd("--workers", "4") as d:
        statuses = []
        lock = threading.Lock()
        for _ in range(4):
            sid = d.post("/v1/sessions", {"d_k": 1, "d_v": 1}).json()["id"]
            done = []

            def appender():
                for i in range(15):
                    r = d.post(f"/v1/sessions/{sid}/kv", {"k": [[i]], "v": [[i]]})
                    with lock:
                        statuses.append(r.status)

            def deleter():
                r = d.request("DELETE", f"/v1/sessions/{sid}")
                done.append(r.status)

            ths = [threading.Thread(target=appender) for _ in range(3)]
            ths.append(threading.Thread(target=deleter))
            for th in ths:
                th.start()
            for th in ths:
                th.join()
            assert done == [204]
            assert d.get(f"/v1/sessions/{sid}").status == 404
        assert set(statuses) <= {200, 404}, sorted(set(statuses))
        assert d.get("/healthz").status == 200

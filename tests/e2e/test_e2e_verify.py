"""tests/e2e/test_e2e_verify.py — /v1/verify and /verify against the real daemon.

GET on both paths gives the same report, whose table matches the seed
article's published figures to 6 decimals; the softmax1 table is recomputed
here with Python's math module; POST runs every check on caller data
(float64 and float32); bad bodies get the error shape.
"""
import math
import random

from attnd_proc import Attnd

PUB_SCORES = [
    (0.707107, 0.0, -0.707107),
    (0.707107, 0.707107, -0.707107),
    (2.828427, 2.121320, 1.414214),
    (1.414214, 1.414214, 0.0),
]
PUB_WEIGHTS = [
    (0.575975, 0.283995, 0.140029),
    (0.445808, 0.445808, 0.108383),
    (0.575975, 0.283995, 0.140029),
    (0.445808, 0.445808, 0.108383),
]

SEED_Q = [[1, 0]]
SEED_K = [[1, 0], [0, 1], [-1, 0]]


def scores_of(q, k, bq, bk):
    """scale * (q + bq) . (k_j + bk), here in plain Python."""
    d = len(q)
    qq = [q[i] + bq[i] for i in range(d)]
    return [sum(qq[i] * (kj[i] + bk[i]) for i in range(d)) / math.sqrt(d) for kj in k]


def by_name(report, name):
    return next(c for c in report["checks"] if c["name"] == name)


def test_get_both_paths_equal_and_published_table(attnd):
    a = attnd.get("/v1/verify")
    b = attnd.get("/verify")
    assert a.status == 200 and b.status == 200
    assert a.headers["content-type"].startswith("application/json")
    ra, rb = a.json(), b.json()
    ra.pop("elapsed_us")
    rb.pop("elapsed_us")
    assert ra == rb
    assert ra["passed"] is True
    assert ra["example"] == "builtin"
    assert ra["tolerance"] == 1e-12
    table = ra["table"]["standard"]
    assert [t["condition"] for t in table] == ["no_bias", "q_bias", "k_bias", "both"]
    for row, s_pub, w_pub in zip(table, PUB_SCORES, PUB_WEIGHTS):
        assert [round(x, 6) for x in row["scores"][0]] == [round(x, 6) for x in s_pub]
        assert [round(x, 6) for x in row["weights"][0]] == list(w_pub)


def test_get_softmax1_table_recomputed(attnd):
    r = attnd.get("/v1/verify").json()
    conds = [([0, 0], [0, 0]), ([0, 1], [0, 0]), ([0, 0], [3, -2]), ([0, 1], [3, -2])]
    for row, (bq, bk) in zip(r["table"]["softmax1"], conds):
        s = scores_of(SEED_Q[0], SEED_K, bq, bk)
        den = 1 + sum(math.exp(x) for x in s)
        for got, x in zip(row["weights"][0], s):
            assert abs(got - math.exp(x) / den) < 1e-12
        assert 0 < sum(row["weights"][0]) < 1
    # softmax1 is not shift invariant: no bias vs common K bias differ
    t1 = r["table"]["softmax1"]
    assert abs(t1[0]["weights"][0][0] - t1[2]["weights"][0][0]) > 0.05


def test_get_every_check_reported(attnd):
    r = attnd.get("/v1/verify").json()
    assert [c["id"] for c in r["checks"]] == list(range(1, 28))
    for c in r["checks"]:
        assert set(c) >= {"id", "name", "claim", "passed", "max_abs_diff",
                          "tolerance", "applicable", "data"}
        assert c["passed"] is True
        if c["applicable"] and not c["expect_change"]:
            assert c["max_abs_diff"] <= c["tolerance"]
    assert by_name(r, "q_bias_exception")["applicable"] is False
    assert by_name(r, "session_decode")["applicable"] is True
    assert by_name(r, "q_bias_exception_allowed_keys")["data"]["allowed_keys"] == [1, 0, 1]
    rc = by_name(r, "k_bias_row_constant")["data"]["row_constant"]
    assert abs(rc[0] - 3 / math.sqrt(2)) < 1e-15


def test_post_caller_data(attnd):
    body = {
        "q": [[0.2, -1, 0.5], [1, 1, 0]],
        "k": [[1, 0, 0], [0, 1, 0], [-1, 0.5, 0], [2, 2, 0]],
        "v": [[1, 2], [3, 4], [5, 6], [7, 8]],
        "bias": {"q": [1, 2, 3], "k": [3, -2, 1], "v": [0.5, -0.5]},
        "softmax": "softmax1",
        "tolerance": 1e-10,
    }
    res = attnd.post("/v1/verify", body)
    assert res.status == 200, res
    r = res.json()
    assert r["passed"] is True
    assert r["example"] == "request"
    assert r["inputs"]["q"] == body["q"]
    assert r["inputs"]["softmax"] == "softmax1"
    assert r["tolerance"] == 1e-10
    # keys lie in the xy-plane: bQ = (1,2,3) projects to (0,0,3)
    ex = by_name(r, "q_bias_exception")
    assert ex["applicable"] is True and ex["passed"] is True
    used = ex["data"]["bias_q_used"]
    assert abs(used[0]) < 1e-12 and abs(used[1]) < 1e-12 and abs(used[2] - 3) < 1e-12
    # check 1 against scores computed here
    s = by_name(r, "base_scores")["data"]["scores_core"]
    for i, q in enumerate(body["q"]):
        for j, x in enumerate(scores_of(q, body["k"], [0] * 3, [0] * 3)):
            assert abs(s[i][j] - x) < 1e-12
    # the same report on the short path
    r2 = attnd.post("/verify", body).json()
    r.pop("elapsed_us")
    r2.pop("elapsed_us")
    assert r == r2


def test_post_float32(attnd):
    body = {"q": SEED_Q, "k": SEED_K, "v": [[1], [2], [3]],
            "bias": {"q": [0, 1], "k": [3, -2], "v": [1]}, "dtype": "float32"}
    res = attnd.post("/v1/verify", body)
    assert res.status == 200, res
    r = res.json()
    assert r["passed"] is True
    assert r["dtype"] == "float32"
    assert r["tolerance"] == 1e-4
    assert "float32" in r["tolerance_note"]
    w = r["table"]["standard"][0]["weights"][0]
    assert [round(x, 6) for x in w] == list(PUB_WEIGHTS[0])
    assert b"0.57597536" in res.body   # shortest float32 text


def test_post_errors(attnd):
    cases = [
        ({"k": [[1]], "v": [[1]]}, 422, "invalid_field", "/q"),
        ({"q": [[1, 0]], "k": [[1, 0, 0]], "v": [[1]]}, 422, "shape_mismatch", "/k"),
        ({"q": [[1, 0]], "k": [[1, 0]], "v": [[1]], "tolerance": -1}, 422,
         "invalid_field", "/tolerance"),
        ({"q": [[1, 0]], "k": [[1, 0]], "v": [[1]], "bias": {"v": [1, 2]}}, 422,
         "shape_mismatch", "/bias/v"),
        ({"q": [[1, 0]], "k": [[1, 0]], "v": [[1]], "nope": 1}, 422,
         "invalid_field", "/nope"),
    ]
    for body, status, code, path in cases:
        res = attnd.post("/v1/verify", body)
        assert res.status == status, (body, res)
        err = res.json()["error"]
        assert err["code"] == code and err["path"] == path, (body, err)
    res = attnd.request("POST", "/v1/verify", "{not json",
                        headers={"Content-Type": "application/json"})
    assert res.status == 400 and res.json()["error"]["code"] == "invalid_json"
    res = attnd.request("PUT", "/verify")
    assert res.status == 405 and "POST" in res.headers.get("allow", "")


MODEL_BODY = {
    "q": [[0.2, -1, 0.5, 1], [1, 1, 0, -0.5], [0.3, 0.1, 0.2, -0.7]],
    "k": [[1, 0, 2, 0], [0, 1, 0, 1], [-1, 0.5, 0, 0], [0.3, 0.3, -1, 2]],
    "v": [[1, 2], [3, 4], [5, 6], [7, 8]], "bias": {"k": [3, -2, 1, 0]},
    "positions": {"q": [4, 9, 6], "k": [0, 3, 5, 8]},
    "segments": {"q": [1, 0, 1], "k": [0, 1, 1, 0]},
    "window": {"left": 4, "right": 2, "sinks": 1}, "softcap": 1.5,
    "softmax": "sink", "sink_logit": [0.25, -2],
    "rope": {"base": 500, "dims": 2, "scaling": {"type": "yarn", "factor": 4,
                                                  "original_max_position": 8}},
}


def test_post_model_inputs(attnd):
    """Issue 16's inputs reach the checks: every one passes on them, the echo
    holds them, check 20 packs the request's segments, 21 keeps the
    window's right side and sinks, 22 uses the softcap, 23 runs a head per
    sink logit; and the packed weights are 0 across segments, here."""
    r = attnd.post("/v1/verify", MODEL_BODY)
    assert r.status == 200, r
    rep = r.json()
    assert rep["passed"], [c["name"] for c in rep["checks"] if not c["passed"]]
    inp = rep["inputs"]
    for key in ("positions", "segments", "window", "softcap", "sink_logit"):
        assert inp[key] == MODEL_BODY[key], key
    assert inp["rope"]["dims"] == 2 and inp["rope"]["scaling"]["type"] == "yarn"
    seg = by_name(rep, "segments_per_segment")
    assert "request's segments; 2 segments" in seg["note"]
    w = seg["data"]["weights_packed"]
    for i, sq in enumerate(MODEL_BODY["segments"]["q"]):
        for j, sk in enumerate(MODEL_BODY["segments"]["k"]):
            if sq != sk:
                assert w[i][j] == 0, (i, j)
    win = by_name(rep, "window_over_every_key")
    assert "the request's right and sinks" in win["note"]
    assert "weights_request_window" in win["data"]
    assert by_name(rep, "softcap_monotone_bounded")["data"]["softcap"] == 1.5
    heads = by_name(rep, "head_sink_limits")["data"]["weights_request_sinks"]
    assert len(heads) == 2 * 3 and len(heads[0]) == 4


def test_post_float16_and_bfloat16(attnd):
    """dtype float16/bfloat16: the report names the dtype, and every weight of
    the table is the float32 request's weight rounded to it (struct's 'e'
    for float16); a score past 65504 is a 422 naming the matrix."""
    import struct

    def f16(x):
        return struct.unpack("<e", struct.pack("<e", x))[0]

    body = {"q": [[1, 0.5]], "k": [[1, 0], [0.25, 1], [-1, 0.5]], "v": [[1], [2], [3]],
            "bias": {"k": [3, -2]}}
    r32 = attnd.post("/v1/verify", dict(body, dtype="float32"))
    r16 = attnd.post("/v1/verify", dict(body, dtype="float16"))
    rb = attnd.post("/v1/verify", dict(body, dtype="bfloat16"))
    assert r32.status == r16.status == rb.status == 200, (r16, rb)
    a, b = r32.json(), r16.json()
    assert b["dtype"] == "float16" and rb.json()["dtype"] == "bfloat16"
    assert b["passed"] and rb.json()["passed"]
    for ca, cb in zip(a["table"]["standard"], b["table"]["standard"]):
        for x, y in zip(ca["weights"][0], cb["weights"][0]):
            assert f16(y) == f16(struct.unpack("<f", struct.pack("<f", x))[0])
    # a number of check data (scale, weight_change, key_difference_rank, ...)
    # stays a number, as in float32: it used to print as a one-element array
    for half in (b, rb.json()):
        for c32, ch in zip(a["checks"], half["checks"]):
            for name, x in c32["data"].items():
                y = ch["data"][name]
                assert isinstance(x, list) == isinstance(y, list), (c32["name"], name, y)
    assert isinstance(by_name(b, "base_scores")["data"]["scale"], (int, float))
    r = attnd.post("/v1/verify", {"q": [[300, 300]], "k": [[300, 300], [1, 1]],
                                  "v": [[1], [2]], "dtype": "float16"})
    assert r.status == 422, r
    err = r.json()["error"]
    assert err["code"] == "non_finite" and "scores" in err["message"], err


def numbers_in(x):
    """JSON numbers in a value (booleans are not numbers)."""
    if isinstance(x, bool) or x is None:
        return 0
    if isinstance(x, (int, float)):
        return 1
    if isinstance(x, list):
        return sum(numbers_in(y) for y in x)
    if isinstance(x, dict):
        return sum(numbers_in(y) for y in x.values())
    return 0


def report_numbers(rep):
    """What --max-elements counts of a verify report: its checks' data, its
    tables and its inputs echo (of every element of a batch)."""
    if "elements" in rep:
        return sum(report_numbers(e) for e in rep["elements"])
    return (numbers_in(rep["inputs"]) + numbers_in(rep["table"]) +
            sum(numbers_in(c["data"]) for c in rep["checks"]))


def test_post_limit_counts_the_report(attnd):
    """A head of n = L = d_k = d_v = 100 holds 692238 numbers: it fits the
    default --max-elements (4194304), which an estimate of 96 arrays of the
    largest shape (4828800) refused. Under a limit of exactly its count it is
    answered; with a softcap (one more number in the inputs echo) it is
    refused, the message saying how many numbers of what."""
    rnd = random.Random(3)

    def mat(rows, cols):
        return [[round(rnd.uniform(-1, 1), 3) for _ in range(cols)] for _ in range(rows)]

    body = {"q": mat(100, 100), "k": mat(100, 100), "v": mat(100, 100)}
    r = attnd.post("/v1/verify", body)
    assert r.status == 200, r
    count = report_numbers(r.json())
    assert 600000 < count < 800000, count
    with Attnd("--max-elements", str(count)) as a:
        r = a.post("/v1/verify", body)
        assert r.status == 200, r
        assert report_numbers(r.json()) == count
        r = a.post("/v1/verify", dict(body, softcap=30))
        assert r.status == 422, r
        err = r.json()["error"]
        assert err["code"] == "response_too_large" and err["path"] == "/q", err
        assert err["message"] == (
            "verify's report would hold %d numbers (the checks' data, the tables and "
            "the inputs echoed), more than the %d --max-elements allows; send fewer "
            "rows" % (count + 1, count)), err


def test_post_check_7_keeps_the_deadline():
    """Check 7's basis of the key differences is O(L·d_k²) in plain loops:
    at L = 1100, d_k = 1024 about 16 s, which ran to its end past a 1 s
    --request-timeout. Each key is now a piece: 504 soon after the deadline."""
    import time

    rnd = random.Random(7)
    body = {"q": [[round(rnd.uniform(-1, 1), 2) for _ in range(1024)]],
            "k": [[round(rnd.uniform(-1, 1), 2) for _ in range(1024)] for _ in range(1100)],
            "v": [[1.0] for _ in range(1100)]}
    with Attnd("--request-timeout", "1") as a:
        t = time.monotonic()
        r = a.post("/v1/verify", body)
        took = time.monotonic() - t
        assert r.status == 504 and r.json()["error"]["code"] == "deadline_exceeded", r
        assert took < 8, took

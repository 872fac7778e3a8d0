"""tests/e2e/test_e2e_verify_batch.py — POST /v1/verify with heads and
batches against the real daemon, and the JSON pointer of a half-precision
result overflow on /v1/verify, /v1/attention and OIP v2.

A rank-4 GQA batch (q sent as a base64 tensor) answers one report per head
and batch element, each equal to the one-head request built here from that
element's slices; "passed" and "failed" agree with the elements. A result
past float16's range is 422 non_finite with the pointer of the value in the
response that was not sent.
"""
import base64
import random
import struct

B, H, HKV, N, L, DK, DV = 2, 4, 2, 3, 5, 4, 2
INFER = "/v2/models/attention/infer"


def rand_mat(rng, rows, cols):
    return [[rng.randint(-100, 100) / 50 for _ in range(cols)] for _ in range(rows)]


def b64_tensor(x, shape):
    flat = list(x)
    for _ in shape[1:]:
        flat = [v for row in flat for v in row]
    return {"shape": shape, "dtype": "float64",
            "data": base64.b64encode(struct.pack("<%dd" % len(flat), *flat)).decode()}


def without(d, *keys):
    return {key: v for key, v in d.items() if key not in keys}


def test_batch_reports_equal_one_head_reports(attnd):
    rng = random.Random(16)
    q = [[rand_mat(rng, N, DK) for _ in range(H)] for _ in range(B)]
    k = [[rand_mat(rng, L, DK) for _ in range(HKV)] for _ in range(B)]
    v = [[rand_mat(rng, L, DV) for _ in range(HKV)] for _ in range(B)]
    bq = rand_mat(rng, H, DK)
    bk = rand_mat(rng, 1, DK)[0]
    bv = rand_mat(rng, HKV, DV)
    pos_q = [[5, 6, 7], [2, 3, 9]]
    seg_q, seg_k = [0, 1, 0], [[0, 0, 1, 1, 0], [1, 0, 1, 0, 0]]
    sinks = [0.5, -1.0, 0.0, 2.0]
    opts = {"window": {"left": 3, "sinks": 1}, "softcap": 2.0, "softmax": "sink",
            "rope": {"base": 1000, "pairs": "half", "scaling": {"type": "ntk", "factor": 2}}}
    body = dict(opts, q=b64_tensor(q, [B, H, N, DK]), k=k, v=v,
                bias={"q": bq, "k": bk, "v": bv}, positions={"q": pos_q},
                segments={"q": seg_q, "k": seg_k}, sink_logit=sinks)
    r = attnd.post("/v1/verify", body)
    assert r.status == 200, r
    j = r.json()
    assert j["rank"] == 4 and j["example"] == "request"
    assert j["shape"] == {"batch": B, "heads": H, "kv_heads": HKV, "n": N, "L": L,
                          "d_k": DK, "d_v": DV}
    els = j["elements"]
    assert len(els) == B * H
    assert j["passed"] == all(e["passed"] for e in els)
    assert j["failed"] == [
        {"batch": e["batch"], "head": e["head"], "kv_head": e["kv_head"],
         "checks": [c["id"] for c in e["checks"] if not c["passed"]]}
        for e in els if not e["passed"]]
    for e, el in enumerate(els):
        b, h = divmod(e, H)
        g = h // (H // HKV)
        assert (el["batch"], el["head"], el["kv_head"]) == (b, h, g)
        one = dict(opts, q=q[b][h], k=k[b][g], v=v[b][g],
                   bias={"q": bq[h], "k": bk, "v": bv[g]}, positions={"q": pos_q[b]},
                   segments={"q": seg_q, "k": seg_k[b]}, sink_logit=[sinks[h]])
        r1 = attnd.post("/v1/verify", one)
        assert r1.status == 200, r1
        assert without(el, "batch", "head", "kv_head") == without(r1.json(), "elapsed_us"), e
    assert j["passed"], j["failed"]


def test_heads_without_batch(attnd):
    """Rank 3: no batch index; 3 query heads on 1 kv head, in float32 and
    in the half dtypes (each element the one-head report of its head)."""
    rng = random.Random(3)
    q = [rand_mat(rng, 2, 2) for _ in range(3)]
    k, v = [rand_mat(rng, 4, 2)], [rand_mat(rng, 4, 3)]
    for dtype in ("float32", "float16", "bfloat16"):
        r = attnd.post("/v1/verify", {"q": q, "k": k, "v": v, "dtype": dtype})
        assert r.status == 200, r
        j = r.json()
        assert j["rank"] == 3 and "batch" not in j["shape"] and j["dtype"] == dtype
        assert [(e["head"], e["kv_head"]) for e in j["elements"]] == [(0, 0), (1, 0), (2, 0)]
        assert all("batch" not in e for e in j["elements"])
        for h in range(3):
            one = attnd.post("/v1/verify", {"q": q[h], "k": k[0], "v": v[0], "dtype": dtype})
            assert without(j["elements"][h], "head", "kv_head") == \
                without(one.json(), "elapsed_us"), (dtype, h)


def test_bad_batches(attnd):
    q3 = [[[1, 0]], [[0, 1]], [[1, 1]]]
    for body, code, path in [
        ({"q": q3, "k": [[[1, 0]], [[0, 1]]], "v": [[[1]], [[2]]]}, "shape_mismatch", "/k"),
        ({"q": q3, "k": [[1, 0]], "v": [[1]]}, "shape_mismatch", "/k"),
        ({"q": [q3], "k": [[[[1, 0]]], [[[1, 0]]]], "v": [[[[1]]]]}, "shape_mismatch", "/k"),
        ({"q": q3, "k": [[[1, 0]]], "v": [[[1]]], "softmax": "sink", "sink_logit": [1, 2]},
         "shape_mismatch", "/sink_logit"),
        ({"q": q3, "k": [[[1, 0]]], "v": [[[1]]], "attn_bias": [[0]]}, "invalid_field",
         "/attn_bias"),
        ({"q": [[[1, 0]]] * 1025, "k": [[[1, 0]]], "v": [[[1]]]}, "limit_exceeded", "/q"),
    ]:
        r = attnd.post("/v1/verify", body)
        assert r.status == 422, (body, r)
        err = r.json()["error"]
        assert (err["code"], err["path"]) == (code, path), err


def test_half_overflow_has_a_pointer(attnd):
    r = attnd.post("/v1/verify", {"q": [[1, 0], [300, 300]], "k": [[300, 300], [0, 1]],
                                  "v": [[1], [2]], "dtype": "float16"})
    assert r.status == 422, r
    err = r.json()["error"]
    assert err["code"] == "non_finite" and err["path"] == "/checks/0/data/scores_core/1/0", err
    r = attnd.post("/v1/verify", {"q": [[[[1, 0]], [[300, 300]]]], "k": [[[[300, 300], [0, 1]]]],
                                  "v": [[[[1], [2]]]], "dtype": "float16"})
    assert r.status == 422, r
    err = r.json()["error"]
    assert err["code"] == "non_finite", err
    assert err["path"] == "/elements/1/checks/0/data/scores_core/0/0", err


def test_v2_half_overflow_has_a_pointer(attnd):
    inputs = [{"name": "q", "shape": [1, 2], "datatype": "FP16", "data": [300, 300]},
              {"name": "k", "shape": [2, 2], "datatype": "FP16", "data": [300, 300, 0, 1]},
              {"name": "v", "shape": [2, 1], "datatype": "FP16", "data": [1, 2]}]
    for outputs, where in [
        ([{"name": "output"}, {"name": "scores"}], "/outputs/1/data/0"),
        ([{"name": "scores", "parameters": {"binary_data": True}}], "/outputs/0"),
        (None, "/outputs/0/data/0"),
    ]:
        body = {"inputs": inputs}
        if outputs:
            body["outputs"] = outputs
        r = attnd.post(INFER, body)
        assert r.status == 400, r
        assert r.json()["error"].endswith("[non_finite at %s]" % where), r.json()
    r = attnd.post(INFER, {"inputs": inputs, "parameters": {"scale": 0.0001},
                           "outputs": [{"name": "output"}, {"name": "qk"}]})
    assert r.status == 400, r
    assert r.json()["error"].endswith("[non_finite at /outputs/1/data/0]"), r.json()


def test_attention_half_overflow_has_a_pointer(attnd):
    """/v1/attention: the value's place in the response as q's rank nests
    it (heads subset counted in the response), base64's data, and an
    extra's element (qk's row and key, lse's row)."""
    big = {"k": [[300, 300], [0, 1]], "v": [[1], [2]], "dtype": "float16"}
    for body, where in [
        (dict(big, q=[[1, 0], [300, 300]]), "/scores/1/0"),
        ({"q": [[[[1, 0]], [[0, 1]]], [[[0, 1]], [[300, 300]]]],
          "k": [[[[300, 300], [0, 1]]]] * 2, "v": [[[[1], [2]]]] * 2, "dtype": "float16"},
         "/scores/1/1/0/0"),
        (dict(big, q=[[[1, 0]], [[300, 300]]], k=[big["k"]], v=[big["v"]], heads=[1]),
         "/scores/0/0/0"),
        (dict(big, q=[[300, 300]], encoding="base64"), "/scores/data"),
        (dict(big, q=[[300, 300]], scale=0.0001, **{"return": ["output", "qk"]}), "/qk/0/0"),
        (dict(big, q=[[1, 0], [300, 300]], scale=1, **{"return": ["qk"]}), "/qk/1/0"),
        (dict(big, q=[[[1, 0]], [[300, 300]]], k=[big["k"]], v=[big["v"]], scale=1,
              **{"return": ["lse"]}), "/lse/1/0"),
    ]:
        r = attnd.post("/v1/attention", body)
        assert r.status == 422, (body, r)
        err = r.json()["error"]
        assert (err["code"], err["path"]) == ("non_finite", where), err

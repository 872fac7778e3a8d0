"""tests/e2e/test_e2e_models.py — the attention of current models through the
real daemon (DESIGN.md part 2): Llama 3.1 RoPE scaling, Mistral's sliding
window, StreamingLLM sinks, Gemma 2's softcap, gpt-oss per-head sinks, Phi's
partial rotary, YaRN and NTK, packed sequences, explicit positions with
ALiBi, and rank-4 batches with every broadcast form, each checked against the
plain-Python reference of ref_models.py (written apart from the C core);
batches equal one request per element; base64 rank-4 tensors; --max-elements
counting every batch element; a session with per-head sinks, softcap and a
scaled partial RoPE whose decode step equals the stateless request over all
its rows, bit for bit in float64. gpt-oss's YaRN ("truncate": false) against
the reference on the numerics review's case, in a session, and across
restarts of a --state-dir daemon.
"""
import base64
import copy
import json
import math
import os
import random
import signal
import struct
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from attnd_proc import Attnd  # noqa: E402
from ref_models import ref  # noqa: E402

TOL = 1e-12


def mat(rng, *shape):
    if len(shape) == 1:
        return [round(rng.uniform(-1.5, 1.5), 3) for _ in range(shape[0])]
    return [mat(rng, *shape[1:]) for _ in range(shape[0])]


def qkv(seed, B, h, h_kv, n, L, d, dv=None):
    rng = random.Random(seed)
    dv = dv or d
    lead = [B] if B else []
    return {"q": mat(rng, *lead, h, n, d), "k": mat(rng, *lead, h_kv, L, d),
            "v": mat(rng, *lead, h_kv, L, dv)}


def close(a, b, path="", tol=TOL):
    if isinstance(b, list):
        assert isinstance(a, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            close(x, y, f"{path}/{i}", tol)
        return
    if b is None or a is None:
        assert a is None and b is None, (path, a, b)
        return
    assert abs(a - b) <= tol * max(1.0, abs(b)), (path, a, b)


def check(attnd, body, tol=TOL):
    r = attnd.post("/v1/attention", body)
    assert r.status == 200, r
    got, want = r.json(), ref(body)
    for key in ("scores", "weights", "output"):
        close(got[key], want[key], "/" + key, tol)
    return got


LLAMA3 = {"type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
          "original_max_position": 16}

CASES = {
    "llama31_gqa_causal": dict(qkv(1, 0, 4, 2, 3, 7, 8), causal=True,
                               rope={"base": 500000, "scaling": LLAMA3}),
    "mistral_window": dict(qkv(2, 0, 2, 1, 6, 6, 4), causal=True, window={"left": 2}),
    "streaming_sinks": dict(qkv(3, 0, 1, 1, 4, 9, 4), causal=True,
                            window={"left": 2, "sinks": 2}),
    "window_both_sides": dict(qkv(4, 0, 1, 1, 5, 5, 2), window={"left": 1, "right": 1}),
    "gemma2_softcap": dict(qkv(5, 0, 2, 2, 3, 4, 4), softcap=0.7, scale=3.0),
    "gpt_oss_head_sinks": dict(qkv(6, 0, 3, 1, 2, 5, 4), softmax="sink",
                               sink_logit=[-0.5, 0.0, 2.5], causal=True),
    "phi_partial_half": dict(qkv(7, 0, 2, 2, 3, 5, 8),
                             rope={"dims": 4, "pairs": "half", "base": 100}),
    "partial_interleaved_odd_dk": dict(qkv(8, 0, 1, 1, 2, 3, 5), rope={"dims": 2}),
    "yarn": dict(qkv(9, 0, 2, 1, 2, 6, 8),
                 rope={"scaling": {"type": "yarn", "factor": 4, "original_max_position": 64}}),
    "yarn_params": dict(qkv(10, 0, 1, 1, 2, 6, 8), rope={"base": 50, "scaling": {
        "type": "yarn", "factor": 2, "original_max_position": 32, "beta_fast": 8,
        "beta_slow": 2, "attention_factor": 1.3}}),
    "yarn_untruncated": dict(qkv(18, 0, 2, 1, 2, 6, 16), positions={"q": [900, 901],
                             "k": [0, 40, 300, 650, 900, 901]}, rope={"base": 100, "scaling": {
                                 "type": "yarn", "factor": 4, "original_max_position": 256,
                                 "beta_fast": 16, "truncate": False}}),
    "ntk": dict(qkv(11, 0, 1, 1, 3, 4, 6), rope={"scaling": {"type": "ntk", "factor": 3}}),
    "linear": dict(qkv(12, 0, 1, 1, 3, 4, 4), rope={"scaling": {"type": "linear", "factor": 2}}),
    "segments_causal": dict(qkv(13, 0, 2, 2, 5, 5, 4), causal=True, rope=True,
                            segments={"q": [0, 0, 1, 1, 1], "k": [0, 0, 1, 1, 1]}),
    "segments_interleaved_top_left": dict(qkv(14, 0, 1, 1, 4, 6, 4), causal="top_left",
                                          segments={"q": [3, 1, 3, 1],
                                                    "k": [1, 3, 3, 1, 1, 3]}),
    "positions_alibi": dict(qkv(15, 0, 2, 2, 2, 4, 4), alibi=True, causal=True,
                            positions={"q": [7, 9], "k": [0, 3, 8, 9]}),
    "positions_rope_huge": dict(qkv(16, 0, 1, 1, 1, 2, 4), rope=True,
                                positions={"q": [2147483647], "k": [2147483646, 2147483000]}),
    "window_empties_rows": dict(qkv(17, 0, 1, 1, 3, 3, 2), window={"left": 0, "right": 0},
                                positions={"q": [5, 0, 1], "k": [0, 1, 2]}),
}


# Angles p*f_i near 2^31 magnify an ulp of f_i (pow in the core, ** here)
# to about 1e-7 of a radian.
TOLS = {"positions_rope_huge": 1e-6}


@pytest.mark.parametrize("name", sorted(CASES))
def test_model_against_reference(attnd, name):
    check(attnd, CASES[name], TOLS.get(name, TOL))


def batch_body(seed=20):
    body = qkv(seed, 2, 2, 1, 3, 4, 4)
    body.update(causal=True, rope={"dims": 2},
                segments={"q": [[0, 0, 1], [0, 1, 1]], "k": [0, 0, 1, 1]},
                positions={"k": [[0, 1, 2, 3], [4, 5, 6, 7]]})
    return body


def element(body, b):
    """The request of batch element b alone (rank 3)."""
    one = copy.deepcopy(body)
    for key in ("q", "k", "v"):
        one[key] = body[key][b]
    for key in ("segments", "positions"):
        for side, arr in body.get(key, {}).items():
            if isinstance(arr[0], list):
                one[key][side] = arr[b]
    for key in ("mask", "attn_bias"):
        if key in body and len(body[key]) == 2 and isinstance(body[key][0][0][0], list):
            one[key] = body[key][b]
    return one


# gpt-oss's RoPE: its config's rope_scaling has "truncate": false.
GPT_OSS_ROPE = {"base": 150000, "pairs": "half",
                "scaling": {"type": "yarn", "factor": 32, "original_max_position": 4096,
                            "beta_fast": 32, "beta_slow": 1, "truncate": False}}


def test_gpt_oss_yarn_untruncated(attnd):
    """The numerics review's case (F1, t20): one head of 64 dims, L = 2000
    keys, causal, a per-head sink, gpt-oss's RoPE. attnd with truncate false
    matches the reference with truncate false; the default (true) is the
    other variant: it matches the reference with truncate true and is far
    from gpt-oss's (output 4.1e-2 apart here, weights 2.3e-2; the review
    measured 8.6e-2 on its data)."""
    rng = random.Random(20)
    body = {"q": mat(rng, 1, 1, 64), "k": mat(rng, 1, 2000, 64), "v": mat(rng, 1, 2000, 64),
            "causal": True, "softmax": "sink", "sink_logit": [0.3], "rope": GPT_OSS_ROPE}
    got = check(attnd, body, 1e-11)
    rounded = copy.deepcopy(body)
    del rounded["rope"]["scaling"]["truncate"]
    dflt = check(attnd, rounded, 1e-11)
    gap = max(abs(a - b) for a, b in zip(dflt["output"][0][0], got["output"][0][0]))
    assert gap > 1e-2, gap


def test_batch_against_reference_and_elements(attnd):
    body = batch_body()
    got = check(attnd, body)
    assert got["meta"]["batch"] == 2
    for b in range(2):
        alone = attnd.post("/v1/attention", element(body, b))
        assert alone.status == 200, alone
        for key in ("scores", "weights", "output"):
            assert got[key][b] == alone.json()[key], (b, key)


def test_batch_broadcasts(attnd):
    body = qkv(21, 2, 2, 2, 2, 3, 2)
    masks = {
        "2d": [[True, False, True], [True, True, False]],
        "3d": [[[True, False, True], [True, True, False]],
               [[False, True, True], [True, True, True]]],
        "4d_full": [[[[True, False, True], [True, True, False]],
                     [[False, True, True], [True, True, True]]],
                    [[[True, True, True], [False, False, True]],
                     [[True, False, False], [True, True, True]]]],
        "4d_heads_1": [[[[True, False, True], [True, True, False]]],
                       [[[False, True, True], [True, True, True]]]],
        "4d_batch_1": [[[[True, False, True], [True, True, False]],
                        [[False, True, True], [True, True, True]]]],
    }
    for name, m in masks.items():
        check(attnd, dict(body, mask=m))
        check(attnd, dict(body, attn_bias=json.loads(
            json.dumps(m).replace("true", "0.25").replace("false", "null"))))
    # a [B][1][n][L] mask equals the same mask spelled out for every head
    spelled = [[m4[0], m4[0]] for m4 in masks["4d_heads_1"]]
    a = attnd.post("/v1/attention", dict(body, mask=masks["4d_heads_1"])).json()
    b = attnd.post("/v1/attention", dict(body, mask=spelled)).json()
    assert a["weights"] == b["weights"] and a["output"] == b["output"]
    # bias vectors [d] and [h][d] apply to every batch element
    check(attnd, dict(body, bias={"q": [0.5, -1], "k": [[1, 0], [0, 2]], "v": [3, 4]}))


def b64(arr, shape):
    flat = []

    def walk(x):
        if isinstance(x, list):
            for y in x:
                walk(y)
        else:
            flat.append(x)
    walk(arr)
    return {"shape": shape, "dtype": "float64",
            "data": base64.b64encode(struct.pack(f"<{len(flat)}d", *flat)).decode()}


def test_batch_base64_in_and_out(attnd):
    body = batch_body(22)
    enc = dict(body, q=b64(body["q"], [2, 2, 3, 4]), k=b64(body["k"], [2, 1, 4, 4]),
               v=b64(body["v"], [2, 1, 4, 4]), encoding="base64")
    r = attnd.post("/v1/attention", enc)
    assert r.status == 200, r
    got = r.json()
    assert got["output"]["shape"] == [2, 2, 3, 4]
    assert got["weights"]["shape"] == [2, 2, 3, 4]
    out = struct.unpack("<48d", base64.b64decode(got["output"]["data"]))
    plain = attnd.post("/v1/attention", body).json()["output"]
    assert list(out) == [x for b in plain for h in b for row in h for x in row]


def test_limits_count_batch_elements():
    # per element: inputs q 4 + k 2 + v 2 = 8 numbers, outputs 8 + 8 + 4 = 20
    with Attnd("--max-elements", "200") as a:
        r = a.post("/v1/attention", qkv(23, 8, 1, 1, 4, 2, 1))      # 64 in, 160 out
        assert r.status == 200, r
        big = qkv(23, 12, 1, 1, 4, 2, 1)                            # 96 in, 240 out
        r = a.post("/v1/attention", big)
        assert r.status == 422 and r.json()["error"]["code"] == "response_too_large", r
        r = a.post("/v1/attention", dict(big, **{"return": ["output"]}))  # 48 out
        assert r.status == 200, r
        r = a.post("/v1/attention", qkv(23, 26, 1, 1, 4, 2, 1))     # 208 in
        assert r.status == 422 and r.json()["error"]["code"] == "limit_exceeded", r


SESSION = {"d_k": 8, "d_v": 4, "heads": 2, "kv_heads": 1, "softmax": "sink",
           "sink_logit": [0.25, -1.5], "softcap": 2.0,
           "rope": {"base": 1000, "dims": 6, "pairs": "half",
                    "scaling": {"type": "yarn", "factor": 4, "original_max_position": 8}}}


def test_session_decode_equals_stateless(attnd):
    rng = random.Random(24)
    r = attnd.post("/v1/sessions", SESSION)
    assert r.status == 201, r
    sid = r.json()["id"]
    info = attnd.get(f"/v1/sessions/{sid}").json()
    assert info["sink_logit"] == [0.25, -1.5] and info["softcap"] == 2.0
    assert info["rope"]["dims"] == 6 and info["rope"]["scaling"]["type"] == "yarn"
    ks, vs = [[] for _ in range(1)], [[] for _ in range(1)]
    for m in (3, 1, 2):
        k, v = mat(rng, 1, m, 8), mat(rng, 1, m, 4)
        assert attnd.post(f"/v1/sessions/{sid}/kv", {"k": k, "v": v}).status == 200
        ks[0] += k[0]
        vs[0] += v[0]
    q, k, v = mat(rng, 2, 1, 8), mat(rng, 1, 1, 8), mat(rng, 1, 1, 4)
    ks[0] += k[0]
    vs[0] += v[0]
    step = attnd.post(f"/v1/sessions/{sid}/attention",
                      {"q": q, "k": k, "v": v, "causal": True})
    assert step.status == 200, step
    stateless = {"q": q, "k": ks, "v": vs, "causal": True}
    for key in ("softmax", "sink_logit", "softcap", "rope"):
        stateless[key] = SESSION[key]
    full = attnd.post("/v1/attention", stateless)
    assert full.status == 200, full
    a, b = step.json(), full.json()
    for key in ("scores", "weights", "output"):
        assert a[key] == b[key], key            # bit for bit: the same text
    close(b["output"], ref(stateless)["output"], "/output")
    # a window on a session step reads the cache's positions
    win = attnd.post(f"/v1/sessions/{sid}/attention",
                     {"q": q, "causal": True, "window": {"left": 2}})
    want = attnd.post("/v1/attention", dict(stateless, window={"left": 2}))
    assert win.status == 200 and want.status == 200
    assert win.json()["output"] == want.json()["output"]


def test_gpt_oss_session_decode_equals_stateless(attnd):
    """A session with gpt-oss's RoPE (truncate false) and per-head sinks:
    GET shows truncate false; a decode step equals the stateless request
    over its rows bit for bit, and the Python reference."""
    rng = random.Random(25)
    spec = {"d_k": 64, "d_v": 8, "heads": 2, "kv_heads": 1, "softmax": "sink",
            "sink_logit": [0.3, -0.7], "rope": GPT_OSS_ROPE}
    r = attnd.post("/v1/sessions", spec)
    assert r.status == 201, r
    sid = r.json()["id"]
    assert attnd.get(f"/v1/sessions/{sid}").json()["rope"]["scaling"]["truncate"] is False
    k, v = mat(rng, 1, 300, 64), mat(rng, 1, 300, 8)
    assert attnd.post(f"/v1/sessions/{sid}/kv", {"k": k, "v": v}).status == 200
    q, k1, v1 = mat(rng, 2, 1, 64), mat(rng, 1, 1, 64), mat(rng, 1, 1, 8)
    step = attnd.post(f"/v1/sessions/{sid}/attention",
                      {"q": q, "k": k1, "v": v1, "causal": True})
    assert step.status == 200, step
    stateless = {"q": q, "k": [k[0] + k1[0]], "v": [v[0] + v1[0]], "causal": True,
                 "softmax": "sink", "sink_logit": spec["sink_logit"], "rope": GPT_OSS_ROPE}
    full = attnd.post("/v1/attention", stateless)
    assert full.status == 200, full
    for key in ("scores", "weights", "output"):
        assert step.json()[key] == full.json()[key], key
    close(full.json()["output"], ref(stateless)["output"], "/output", 1e-11)


def test_state_dir_keeps_yarn_truncate(tmp_path):
    """truncate false survives a restart from the journal (SIGKILL) and one
    from the final snapshot (SIGTERM): the same echo and answer bits."""
    rng = random.Random(26)
    spec = {"d_k": 64, "d_v": 4, "rope": GPT_OSS_ROPE}
    q = {"q": mat(rng, 1, 64), "return": ["output", "weights"]}
    with Attnd("--state-dir", str(tmp_path)) as a:
        sid = a.post("/v1/sessions", spec).json()["id"]
        kv = {"k": mat(rng, 40, 64), "v": mat(rng, 40, 4)}
        assert a.post(f"/v1/sessions/{sid}/kv", kv).status == 200
        want = a.post(f"/v1/sessions/{sid}/attention", q).json()
        rope = a.get(f"/v1/sessions/{sid}").json()["rope"]
        assert rope["scaling"]["truncate"] is False
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(timeout=15)
    for _ in range(2):
        with Attnd("--state-dir", str(tmp_path)) as a:
            assert a.get(f"/v1/sessions/{sid}").json()["rope"] == rope
            got = a.post(f"/v1/sessions/{sid}/attention", q).json()
            for key in ("weights", "output"):
                assert got[key] == want[key], key
            a.signal(signal.SIGTERM)
            assert a.wait(timeout=20) == 0


def test_state_dir_keeps_model_settings(tmp_path):
    with Attnd("--state-dir", str(tmp_path)) as a:
        sid = a.post("/v1/sessions", SESSION).json()["id"]
        assert a.post(f"/v1/sessions/{sid}/kv", {"k": [[[1] * 8]], "v": [[[1] * 4]]}).status == 200
        before = a.get(f"/v1/sessions/{sid}").json()
    with Attnd("--state-dir", str(tmp_path)) as a:
        after = a.get(f"/v1/sessions/{sid}").json()
    for key in ("sink_logit", "softcap", "rope", "length", "softmax"):
        assert after[key] == before[key], key


def test_batch_extras_per_element(attnd):
    """qk, lse, stats, heads and weights_top_k with a rank-4 q and segments
    at their default positions: each element's extras match the Python
    reference's scores and weights, and the same request of that element
    alone, number for number."""
    body = batch_body()
    del body["positions"]
    body.update(heads=[1], weights_top_k=2)
    body["return"] = ["scores", "weights", "output", "qk", "lse", "stats"]
    r = attnd.post("/v1/attention", body)
    assert r.status == 200, r
    got = r.json()
    want = ref({k: v for k, v in body.items()
                if k not in ("heads", "weights_top_k", "return")})
    assert got["meta"]["heads_returned"] == [1]
    for b in range(2):
        for i, (srow, wrow) in enumerate(zip(want["scores"][b][1], want["weights"][b][1])):
            allowed = [s for s in srow if s is not None]
            m = max(allowed)
            lse = m + math.log(sum(math.exp(s - m) for s in allowed))
            close(got["lse"][b][0][i], lse, f"/lse/{b}/0/{i}")
            close(got["stats"]["max_weight"][b][0][i], max(wrow))
            order = sorted(range(len(wrow)), key=lambda j: (-wrow[j], j))
            top = [j for j in order if srow[j] is not None][:2]
            top += [-1] * (2 - len(top))
            assert got["weights"]["indices"][b][0][i] == top, (b, i)
            assert got["stats"]["argmax"][b][0][i] == top[0]
        alone = attnd.post("/v1/attention", element(body, b))
        assert alone.status == 200, alone
        for key in ("scores", "weights", "output", "qk", "lse", "stats"):
            one = alone.json()[key]
            if isinstance(one, dict):
                assert {k: v[b] for k, v in got[key].items()} == one, (b, key)
            else:
                assert got[key][b] == one, (b, key)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_heads_subset_bits(dtype):
    """The same inputs give the same bits whatever the heads subset,
    `return`, encoding and worker count: each chosen head's numbers equal
    the whole request's, compared as the printed shortest round-trip text."""
    body = qkv(31, 0, 4, 2, 70, 90, 16, 8)
    body.update(causal=True, dtype=dtype, window={"left": 40, "sinks": 2},
                rope={"dims": 8})
    results = []
    for workers in ("1", "2"):
        with Attnd("--workers", workers) as a:
            whole = a.post("/v1/attention", body)
            assert whole.status == 200, whole
            results.append(whole.json())
            for ret in (["output"], ["weights", "output"],
                        ["scores", "weights", "output", "lse", "stats"]):
                sub = a.post("/v1/attention", dict(body, heads=[3, 1], **{"return": ret}))
                assert sub.status == 200, sub
                got = sub.json()
                for key in ("scores", "weights", "output"):
                    if key in got:
                        assert got[key] == [whole.json()[key][3], whole.json()[key][1]], \
                            (workers, ret, key)
            enc = a.post("/v1/attention", dict(body, heads=[2], encoding="base64",
                                                **{"return": ["output"]}))
            raw = base64.b64decode(enc.json()["output"]["data"])
            fmt = "<%d%s" % (70 * 8, "d" if dtype == "float64" else "f")
            want = [x for row in whole.json()["output"][2] for x in row]
            if dtype == "float32":      # the shortest text reads back to the float
                want = [struct.unpack("<f", struct.pack("<f", x))[0] for x in want]
            assert list(struct.unpack(fmt, raw)) == want
    assert results[0]["output"] == results[1]["output"]
    assert results[0]["weights"] == results[1]["weights"]


@pytest.mark.parametrize("seg,needle", [
    (9007199254740993, "expected an integer of magnitude at most 2^53"),
    (-9007199254740993, "expected an integer of magnitude at most 2^53"),
    (1.5, "expected an integer of magnitude at most 2^53"),
])
def test_a_segment_id_out_of_range_says_its_range(attnd, seg, needle):
    """A segment id past 2^53 was refused with "expected an integer", which
    it is; the message now gives the range, as positions' does."""
    r = attnd.post("/v1/attention", {"q": [[1, 0]], "k": [[1, 0], [0, 1]], "v": [[1], [2]],
                                     "segments": {"q": [seg], "k": [0, 0]}})
    assert r.status == 422, r
    err = r.json()["error"]
    assert err["path"] == "/segments/q/0" and err["message"] == needle, err
    ok = attnd.post("/v1/attention", {"q": [[1, 0]], "k": [[1, 0], [0, 1]], "v": [[1], [2]],
                                      "segments": {"q": [-9007199254740992], "k": [0, 0]}})
    assert ok.status == 200, ok

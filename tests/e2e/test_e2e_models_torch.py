"""tests/e2e/test_e2e_models_torch.py — the attention of current models
through the real daemon against a second reference, written in PyTorch
(Debian's python3-torch, 1.13) from the models' own published definitions
rather than from DESIGN.md's table: Hugging Face transformers' RoPE
initialisations (default, linear, static NTK, Llama 3.1's `llama3` with its
where() bands, YaRN's correction range and ramp with `truncate` true and
gpt-oss's false, its attention factor on cos and sin), `rotate_half` pairs
and Meta's interleaved ones, partial rotary, `repeat_kv` for GQA/MQA, Gemma
2's softcap after the scale, Mistral's sliding window, gpt-oss's sink column
concatenated to the logits. ref_models.py is the first reference (plain
Python); this one shares no code with it nor with the C core.

Checked: seeded random requests over every option (rank 3 and 4, GQA/MQA,
heads subsets, causal variants, window with sinks, softcap, scale, sink
logits per head, softmax1, segments, ALiBi, mask, attn_bias, biases,
positions near and past 131072) in each dtype (float64 to 1e-11 relative,
float32 to 2e-5, float16/bfloat16 to 4 units of the dtype); long contexts
(up to 3000 keys and 300 rows, the core's blocked passes); sessions
decoded token by token (float64/float32 bit for bit against the stateless
pass, every dtype against the reference, rolling windows by their held
columns, at positions past 131072); the kv_dtype rounding (int8 with its
per-row scale) modelled exactly, on 20 rows and on 2001 of d_k 72; OIP v2
with rope_* parameters, sink_logits and heads; an OIP v2 sequence token by
token.
Skips when torch is missing (it is in the Makefile's DEPS_TEST).
"""
import json
import math
import random

import pytest

torch = pytest.importorskip("torch", reason="python3-torch (Makefile DEPS_TEST)")

F64 = torch.float64
TOL = {"float64": 1e-11, "float32": 2e-5, "float16": 4 * 2.0 ** -10, "bfloat16": 4 * 2.0 ** -7}
V2_DT = {"float64": "FP64", "float32": "FP32", "float16": "FP16", "bfloat16": "BF16"}


# ---- the reference -----------------------------------------------------------

def inv_freq(r, base, sc):
    """HF's _compute_*_parameters: (inverse frequencies [r/2], attention factor)."""
    i = torch.arange(0, r, 2, dtype=F64)
    f = 1.0 / (base ** (i / r))
    if not sc:
        return f, 1.0
    kind, factor = sc["type"], sc["factor"]
    if kind == "linear":
        return f / factor, 1.0
    if kind == "ntk":
        return 1.0 / ((base * factor ** (r / (r - 2))) ** (i / r)), 1.0
    if kind == "llama3":
        low, high, old = sc["low_freq_factor"], sc["high_freq_factor"], sc["original_max_position"]
        wavelen = 2 * math.pi / f
        llama = torch.where(wavelen > old / low, f / factor, f)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * llama / factor + smooth * llama
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        return torch.where(medium, smoothed, llama), 1.0
    assert kind == "yarn", kind
    old = sc["original_max_position"]
    att = sc.get("attention_factor")
    if att is None:
        att = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0

    def correction_dim(rotations):
        return r * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(base))
    lo, hi = correction_dim(sc.get("beta_fast", 32)), correction_dim(sc.get("beta_slow", 1))
    if sc.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, r - 1)
    if lo == hi:
        hi += 0.001
    ramp = torch.clamp((torch.arange(r // 2, dtype=F64) - lo) / (hi - lo), 0, 1)
    extrapolation = 1 - ramp
    pos = base ** (i / r)
    return (1.0 / (factor * pos)) * (1 - extrapolation) + (1.0 / pos) * extrapolation, att


def apply_rope(x, positions, rope):
    """x [heads, N, d] rotated at positions [N] on its first rope.dims dims."""
    r = rope.get("dims", x.shape[-1])
    if r == 0:
        return x
    f, att = inv_freq(r, rope.get("base", 10000.0), rope.get("scaling"))
    angle = torch.tensor(positions, dtype=F64)[:, None] * f[None, :]
    cos, sin = torch.cos(angle) * att, torch.sin(angle) * att
    xr, rest = x[..., :r], x[..., r:]
    if rope.get("pairs", "interleaved") == "half":
        rotated = torch.cat([-xr[..., r // 2:], xr[..., :r // 2]], -1)
        out = xr * torch.cat([cos, cos], -1) + rotated * torch.cat([sin, sin], -1)
    else:
        a, b = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(xr.shape)
    return torch.cat([out, rest], -1)


def rnd(x, dtype):
    """x as the dtype holds it, back in float64."""
    return x if dtype == "float64" else x.to(getattr(torch, dtype)).to(F64)


def default_positions(n, L, causal, sq, sk):
    top = causal == "top_left"
    if sq is None:
        return (list(range(n)) if top else [L - n + i for i in range(n)]), list(range(L))
    pk, count = [], {}
    for s in sk:
        pk.append(count.get(s, 0))
        count[s] = count.get(s, 0) + 1
    nq = {s: sq.count(s) for s in sq}
    pq, seen = [], {}
    for s in sq:
        c = seen.get(s, 0)
        seen[s] = c + 1
        pq.append(c if top else count.get(s, 0) - nq[s] + c)
    return pq, pk


def rank(m):
    return 1 + rank(m[0]) if isinstance(m, list) else 0


def per_head(m, b, h):
    """mask/attn_bias of rank 2..4 as h [n][L] lists for batch element b."""
    if m is None:
        return None
    if rank(m) == 4:
        m = m[b] if len(m) > 1 else m[0]
    elif rank(m) == 2:
        m = [m]
    return m if len(m) == h else [m[0]] * h


def attend(body, q, k, v, b):
    """One batch element: q [h][n][d], k/v [h_kv][L][d] as float64 tensors."""
    h, n, d = q.shape
    h_kv, L = k.shape[0], k.shape[1]
    dtype = body.get("dtype", "float64")
    for name, x in (("q", "q"), ("k", "k"), ("v", "v")):
        vec = body.get("bias", {}).get(name)
        if vec is not None:
            vec = rnd(torch.tensor(vec, dtype=F64), dtype)
            vec = vec[:, None, :] if vec.dim() == 2 else vec
            if name == "q":
                q = q + vec
            elif name == "k":
                k = k + vec
            else:
                v = v + vec
    causal = "bottom_right" if body.get("causal") is True else body.get("causal", False)

    def pick(a):
        return None if a is None else a[b] if isinstance(a[0], list) else a
    seg = body.get("segments", {})
    sq, sk = pick(seg.get("q")), pick(seg.get("k"))
    pq, pk = default_positions(n, L, causal, sq, sk)
    pq = pick(body.get("positions", {}).get("q")) or pq
    pk = pick(body.get("positions", {}).get("k")) or pk
    rope = {} if body.get("rope") is True else body.get("rope")
    if rope is not None:
        q, k = apply_rope(q, pq, rope), apply_rope(k, pk, rope)
    k, v = k.repeat_interleave(h // h_kv, 0), v.repeat_interleave(h // h_kv, 0)
    s = torch.matmul(q, k.transpose(-1, -2)) * body.get("scale", 1 / math.sqrt(d))
    if body.get("softcap"):
        s = torch.tanh(s / body["softcap"]) * body["softcap"]
    Pq, Pk = torch.tensor(pq)[:, None], torch.tensor(pk)[None, :]
    allowed = torch.ones(h, n, L, dtype=torch.bool)
    if causal:
        allowed &= Pk <= Pq
    w = body.get("window")
    if w is not None:
        inside = torch.ones(n, L, dtype=torch.bool)
        if w.get("left") is not None:
            inside &= Pq - w["left"] <= Pk
        if w.get("right") is not None:
            inside &= Pk <= Pq + w["right"]
        allowed &= inside | (Pk < w.get("sinks", 0))
    if sq is not None:
        allowed &= torch.tensor(sq)[:, None] == torch.tensor(sk)[None, :]
    mask = per_head(body.get("mask"), b, h)
    if mask is not None:
        allowed &= torch.tensor(mask, dtype=torch.bool)
    ab = per_head(body.get("attn_bias"), b, h)
    if ab is not None:
        ab = torch.tensor(json.loads(json.dumps(ab).replace("null", "NaN")), dtype=F64)
        allowed &= ~ab.isnan()
        s = s + rnd(torch.nan_to_num(ab, nan=0.0), dtype)
    alibi = body.get("alibi")
    if alibi:
        slopes = torch.tensor(alibi["slopes"] if isinstance(alibi, dict) else
                              [2 ** (-8 * (i + 1) / h) for i in range(h)], dtype=F64)
        s = s - slopes[:, None, None] * (Pq - Pk).abs().to(F64)[None]
    logits = torch.where(allowed, s, torch.full_like(s, -math.inf))
    softmax = body.get("softmax", "standard")
    if softmax == "standard":
        top = logits.max(-1, keepdim=True).values
        e = torch.exp(logits - torch.where(torch.isinf(top), torch.zeros_like(top), top))
        den = e.sum(-1, keepdim=True)
        p = e / torch.where(den > 0, den, torch.ones_like(den))
    else:                       # gpt-oss: a sink column beside the logits
        sink = body.get("sink_logit", 0.0) if softmax == "sink" else 0.0
        sink = torch.tensor(sink if isinstance(sink, list) else [sink] * h, dtype=F64)
        sink = rnd(sink, dtype) if dtype in ("float16", "bfloat16") else sink
        both = torch.cat([logits, sink[:, None, None].expand(h, n, 1)], -1)
        p = torch.softmax(both - both.max(-1, keepdim=True).values, -1)[..., :-1]
    return torch.where(allowed, s, torch.full_like(s, math.nan)), p, torch.matmul(p, v)


def reference(body):
    """(scores with NaN where masked, weights, output), each of q's rank."""
    dtype = body.get("dtype", "float64")
    q, k, v = (rnd(torch.tensor(body[x], dtype=F64), dtype) for x in "qkv")
    r = q.dim()
    while q.dim() < 4:
        q, k, v = q[None], k[None], v[None]
    res = [attend(body, q[b], k[b], v[b], b) for b in range(q.shape[0])]
    out = [torch.stack([x[i] for x in res]) for i in range(3)]
    return [x.reshape(x.shape[4 - r:]) for x in out]


def close(got, want, tol, what):
    got = torch.tensor(json.loads(json.dumps(got).replace("null", "NaN")), dtype=F64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    bad = ~(((got - want).abs() <= tol * want.abs().clamp(min=1)) | (got.isnan() & want.isnan()))
    if bad.any():
        at = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(f"{what}{list(at)}: attnd {got[at].item()}, reference "
                             f"{want[at].item()} ({int(bad.sum())} apart)")


def check(got, want, tol, what, keys=("scores", "weights", "output")):
    for key, w in zip(("scores", "weights", "output"), want):
        if key in keys:
            close(got[key], w, tol, f"{what}/{key}")


def sub_heads(want, heads):
    return [x[:, heads] if x.dim() == 4 else x[heads] for x in want]


# ---- random requests ------------------------------------------------------------

def mat(rng, *shape):
    if len(shape) == 1:
        return [round(rng.uniform(-1.5, 1.5), 3) for _ in range(shape[0])]
    return [mat(rng, *shape[1:]) for _ in range(shape[0])]


def random_rope(rng, d):
    rope = {}
    if rng.random() < 0.5:
        rope["base"] = rng.choice([10000, 500000, 150000, 100])
    if rng.random() < 0.6:
        rope["pairs"] = rng.choice(["half", "interleaved"])
    if rng.random() < 0.4:
        rope["dims"] = rng.choice(range(4, d + 1, 2))
    kind = rng.choice([None, "linear", "ntk", "llama3", "yarn"])
    if kind in ("linear", "ntk"):
        rope["scaling"] = {"type": kind, "factor": rng.choice([2, 4, 8])}
    elif kind == "llama3":
        rope["scaling"] = {"type": "llama3", "factor": 8, "low_freq_factor": 1,
                           "high_freq_factor": 4, "original_max_position": rng.choice([16, 8192])}
    elif kind == "yarn":
        rope["scaling"] = {"type": "yarn", "factor": rng.choice([4, 32]),
                           "original_max_position": rng.choice([64, 4096])}
        if rng.random() < 0.5:
            rope["scaling"]["truncate"] = rng.choice([True, False])
    return rope


def random_body(seed):
    rng = random.Random(seed)
    h = rng.choice([1, 2, 4, 6])
    h_kv = rng.choice([x for x in (1, 2, 3, 6) if h % x == 0])
    d, L = rng.choice([4, 6, 8, 16, 64]), rng.randint(1, 30)
    d_v, n, B = rng.choice([1, 3, d]), rng.randint(1, L), rng.choice([0, 0, 2])
    lead = [B] if B else []
    body = {"q": mat(rng, *lead, h, n, d), "k": mat(rng, *lead, h_kv, L, d),
            "v": mat(rng, *lead, h_kv, L, d_v),
            "dtype": rng.choice(["float64", "float32", "float16", "bfloat16"])}

    def each(f):
        return [f() for _ in range(B)] if B and rng.random() < 0.5 else f()
    if rng.random() < 0.6:
        body["causal"] = rng.choice([True, "top_left", "bottom_right"])
    if rng.random() < 0.5:
        body["rope"] = random_rope(rng, d) if rng.random() < 0.9 else True
    if rng.random() < 0.3:
        at = rng.choice([0, 4090, 131000, 200000])
        body["positions"] = {"q": each(lambda: sorted(rng.sample(range(at, at + 3 * L), n))),
                             "k": each(lambda: sorted(rng.sample(range(at, at + 3 * L), L)))}
    if rng.random() < 0.3:
        body["window"] = {k: f() for k, f in (("left", lambda: rng.randint(0, 6)),
                                              ("right", lambda: rng.randint(0, 3)),
                                              ("sinks", lambda: rng.randint(0, 3)))
                          if rng.random() < {"left": 0.8, "right": 0.3, "sinks": 0.4}[k]}
    if rng.random() < 0.3:
        body["softcap"] = rng.choice([0.5, 2.0, 50.0])
    if rng.random() < 0.3:
        body["scale"] = rng.choice([1 / 12, 3.0, 0.5])
    kind = rng.random()
    if kind < 0.3:
        body["softmax"] = "sink"
        body["sink_logit"] = [round(rng.uniform(-3, 3), 2) for _ in range(h)] \
            if rng.random() < 0.7 else 0.4
    elif kind < 0.4:
        body["softmax"] = "softmax1"
    if rng.random() < 0.2:
        def segs(m):
            return sorted(rng.choice([0, 1, 2]) for _ in range(m))
        body["segments"] = {"q": each(lambda: segs(n)), "k": each(lambda: segs(L))}
    if rng.random() < 0.2:
        body["alibi"] = True if rng.random() < 0.5 else \
            {"slopes": [round(rng.uniform(0, 1), 3) for _ in range(h)]}
    if rng.random() < 0.3:
        shape = rng.choice([[n, L], [h, n, L], [1, n, L]] +
                           ([[B, h, n, L], [B, 1, n, L], [1, h, n, L]] if B else []))

        def grid(sh, f):
            return [grid(sh[1:], f) for _ in range(sh[0])] if len(sh) > 1 else \
                [f() for _ in range(sh[0])]
        if rng.random() < 0.5:
            body["mask"] = grid(shape, lambda: rng.random() < 0.8)
        else:
            body["attn_bias"] = grid(shape, lambda: None if rng.random() < 0.15
                                     else round(rng.uniform(-2, 2), 2))
    if rng.random() < 0.2:
        body["bias"] = {"q": mat(rng, d), "k": mat(rng, h_kv, d)}
    heads = sorted(rng.sample(range(h), rng.randint(1, h)), key=lambda _: rng.random()) \
        if h > 1 and rng.random() < 0.4 else None
    return body, heads


def tol_of(body):
    tol = TOL[body.get("dtype", "float64")]
    # angles of positions past 2^17 magnify an ulp of a frequency (pow in
    # the core, ** here) to about 1e-11 of a radian
    return max(tol, 1e-9) if "positions" in body and "rope" in body else tol


@pytest.mark.parametrize("chunk", range(6))
def test_random_requests_against_torch(attnd, chunk):
    for seed in range(chunk * 150, (chunk + 1) * 150):
        body, heads = random_body(seed)
        req = dict(body, heads=heads) if heads else body
        r = attnd.post("/v1/attention", req)
        if r.status == 422 and "needs more than 2 rotated dims" in r.body.decode():
            continue                # ntk on two dims: refused, as documented
        assert r.status == 200, (seed, r)
        want = reference(body)
        check(r.json(), sub_heads(want, heads) if heads else want, tol_of(body), f"seed {seed}")


# The models' own settings at positions past their original context (Llama
# 3.1 at 131072, gpt-oss past 4096 with truncate false), in every dtype.
MODELS = {
    "llama31_131072": ({"base": 500000, "pairs": "half", "scaling": {
        "type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
        "original_max_position": 8192}}, {}, 131072),
    "gpt_oss": ({"base": 150000, "pairs": "half", "scaling": {
        "type": "yarn", "factor": 32, "original_max_position": 4096, "beta_fast": 32,
        "beta_slow": 1, "truncate": False}},
        {"softmax": "sink", "sink_logit": [0.3, -0.7, 1.9, 0.0], "window": {"left": 127}}, 131000),
    "gemma2": ({"base": 10000, "pairs": "half"},
               {"softcap": 50.0, "scale": 1 / 12, "window": {"left": 4095}}, 9000),
    "phi_partial": ({"base": 10000, "pairs": "half", "dims": 16}, {}, 140000),
}


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_models_past_their_context(attnd, model, dtype):
    rope, extra, last = MODELS[model]
    rng = random.Random(model)
    body = dict(extra, q=mat(rng, 4, 3, 64), k=mat(rng, 2, 40, 64), v=mat(rng, 2, 40, 8),
                rope=rope, causal=True, dtype=dtype,
                positions={"q": [last - 2, last - 1, last],
                           "k": [0, 1, 2, 3] + list(range(last - 35, last + 1))})
    got = attnd.post("/v1/attention", body)
    assert got.status == 200, got
    check(got.json(), reference(body), tol_of(body), model)
    sub = attnd.post("/v1/attention", dict(body, heads=[3, 0]))
    assert sub.status == 200, sub
    check(sub.json(), sub_heads(reference(body), [3, 0]), tol_of(body), model + "/heads")


def long_body(seed):
    """A long context (200 to 3000 keys, up to 300 query rows, d up to 128):
    the core's blocked and split passes, windows and sinks across blocks."""
    rng = random.Random(seed)
    h = rng.choice([1, 2, 4, 8])
    h_kv = rng.choice([x for x in (1, 2, 4, 8) if h % x == 0])
    d, L = rng.choice([32, 64, 128]), rng.choice([200, 700, 1500, 3000])
    n = rng.choice([1, 2, 17, 64, min(L, 300)])
    gen = torch.Generator().manual_seed(seed)

    def m(*shape):
        return (torch.rand(*shape, generator=gen, dtype=F64) * 3 - 1.5).round(decimals=3).tolist()
    body = {"q": m(h, n, d), "k": m(h_kv, L, d), "v": m(h_kv, L, rng.choice([8, d])),
            "dtype": rng.choice(["float64", "float32", "float16", "bfloat16"]),
            "return": ["output"] if n * L * h > 200000 else ["scores", "weights", "output"]}
    if rng.random() < 0.7:
        body["causal"] = rng.choice([True, "top_left"])
    if rng.random() < 0.5:
        body["rope"] = random_rope(rng, d)
    if rng.random() < 0.5:
        body["window"] = {"left": rng.choice([0, 5, 63, 64, 100, 511])}
        if rng.random() < 0.3:
            body["window"]["right"] = rng.choice([0, 3, 64])
        if rng.random() < 0.5:
            body["window"]["sinks"] = rng.choice([1, 4, 70])
    if rng.random() < 0.3:
        body["softcap"] = rng.choice([2.0, 50.0])
    kind = rng.random()
    if kind < 0.4:
        body["softmax"] = "sink"
        body["sink_logit"] = [round(rng.uniform(-3, 3), 2) for _ in range(h)]
    elif kind < 0.55:
        body["softmax"] = "softmax1"
    if rng.random() < 0.2:
        body["segments"] = {"q": sorted(rng.choice(range(4)) for _ in range(n)),
                            "k": sorted(rng.choice(range(4)) for _ in range(L))}
    if rng.random() < 0.2:
        body["alibi"] = True
    heads = rng.sample(range(h), rng.randint(1, h)) if h > 1 and rng.random() < 0.3 else None
    return body, heads


@pytest.mark.parametrize("seed", range(16))
def test_long_contexts_against_torch(attnd, seed):
    body, heads = long_body(seed)
    r = attnd.post("/v1/attention", dict(body, heads=heads) if heads else body)
    assert r.status == 200, r
    want = reference({k: x for k, x in body.items() if k != "return"})
    check(r.json(), sub_heads(want, heads) if heads else want, tol_of(body), f"seed {seed}",
          body["return"])


# ---- sessions ----------------------------------------------------------------

def random_spec(rng):
    h = rng.choice([1, 2, 4])
    h_kv = rng.choice([x for x in (1, 2, 4) if h % x == 0])
    d = rng.choice([4, 8, 16])
    spec = {"d_k": d, "d_v": rng.choice([2, d]), "heads": h, "kv_heads": h_kv,
            "dtype": rng.choice(["float64", "float32", "float16", "bfloat16"])}
    if rng.random() < 0.7:
        spec["rope"] = random_rope(rng, d)
    if rng.random() < 0.4:
        spec["softcap"] = rng.choice([1.0, 50.0])
    if rng.random() < 0.4:
        spec["softmax"] = "sink"
        spec["sink_logit"] = [round(rng.uniform(-2, 2), 2) for _ in range(h)]
    if rng.random() < 0.3:
        spec["scale"] = 0.3
    if rng.random() < 0.3:
        spec["alibi"] = True
    if rng.random() < 0.3:
        spec["bias"] = {"q": mat(rng, d), "k": mat(rng, h_kv, d), "v": mat(rng, spec["d_v"])}
    if rng.random() < 0.4:
        spec["window"] = {"left": rng.randint(0, 5)}
        if rng.random() < 0.5:
            spec["window"]["sinks"] = rng.randint(1, 3)
    return spec


MODEL_KEYS = ("dtype", "rope", "softcap", "softmax", "sink_logit", "scale", "alibi", "bias",
              "window")


def stateless_of(spec, q, K, V):
    body = {"q": q, "k": K, "v": V, "causal": True}
    body.update({key: spec[key] for key in MODEL_KEYS if key in spec})
    return body


def held_columns(held, appended, length):
    return [c for s, e in held for c in range(s, e)] + list(range(length - appended, length))


@pytest.mark.parametrize("seed", range(24))
def test_session_decoded_token_by_token(attnd, seed):
    """A prefill, then 80 steps of one to three rows (a rolling session's
    window crosses its 64-row pages): each step against the reference over
    every row ever appended (by the held columns when it rolls), and, in
    float64 and float32 with no window, bit for bit against the stateless
    request over all its rows."""
    rng = random.Random(seed)
    spec = random_spec(rng)
    r = attnd.post("/v1/sessions", spec)
    assert r.status == 201, r
    sid = r.json()["id"]
    h, h_kv, d, d_v = spec["heads"], spec["kv_heads"], spec["d_k"], spec["d_v"]
    K, V = [[] for _ in range(h_kv)], [[] for _ in range(h_kv)]
    for step in range(81):
        m = rng.randint(1, 5) if step == 0 else rng.choice([1, 1, 1, 2, 3])
        q, k, v = mat(rng, h, rng.randint(1, m), d), mat(rng, h_kv, m, d), mat(rng, h_kv, m, d_v)
        for g in range(h_kv):
            K[g] += k[g]
            V[g] += v[g]
        held = attnd.get(f"/v1/sessions/{sid}").json().get("held")
        req = {"q": q, "k": k, "v": v, "causal": True}
        heads = rng.sample(range(h), rng.randint(1, h)) if h > 1 and rng.random() < 0.3 else None
        if heads:
            req["heads"] = heads
        got = attnd.post(f"/v1/sessions/{sid}/attention", req)
        assert got.status == 200, (step, got)
        body = stateless_of(spec, q, K, V)
        scores, weights, output = reference(body)
        if heads:
            scores, weights, output = scores[heads], weights[heads], output[heads]
        if held is not None:
            cols = held_columns(held, m, len(K[0]))
            scores, weights = scores[..., cols], weights[..., cols]
        check(got.json(), (scores, weights, output), TOL[spec["dtype"]], f"step {step}")
        if spec["dtype"] in ("float64", "float32") and held is None and not heads:
            full = attnd.post("/v1/attention", body)
            for key in ("scores", "weights", "output"):
                assert got.json()[key] == full.json()[key], (step, key)
    assert attnd.request("DELETE", f"/v1/sessions/{sid}").status == 204


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_rolling_session_past_131072(attnd, dtype):
    """Llama 3.1's RoPE with per-head sinks in a rolling session appended
    past position 131072: each decode step equals the reference over the
    held rows at their positions."""
    rng = random.Random(dtype)
    spec = {"d_k": 16, "d_v": 4, "heads": 2, "kv_heads": 1, "dtype": dtype,
            "softmax": "sink", "sink_logit": [0.5, -1.0], "window": {"left": 20, "sinks": 2},
            "rope": MODELS["llama31_131072"][0]}
    sid = attnd.post("/v1/sessions", spec).json()["id"]
    K, V = [], []
    while len(K) < 131060:
        m = min(8192, 131060 - len(K))
        k = [[[0.01 * ((i * 7 + j) % 13 - 6) for j in range(16)] for i in range(m)]]
        v = [[[0.1 * ((i + j) % 5) for j in range(4)] for i in range(m)]]
        assert attnd.post(f"/v1/sessions/{sid}/kv", {"k": k, "v": v}).status == 200
        K += k[0]
        V += v[0]
    for step in range(24):
        q, k, v = mat(rng, 2, 1, 16), mat(rng, 1, 1, 16), mat(rng, 1, 1, 4)
        cols = held_columns(attnd.get(f"/v1/sessions/{sid}").json()["held"], 1, len(K) + 1)
        got = attnd.post(f"/v1/sessions/{sid}/attention", {"q": q, "k": k, "v": v})
        assert got.status == 200, got
        K += k[0]
        V += v[0]
        body = dict(stateless_of(spec, q, [[K[c] for c in cols]], [[V[c] for c in cols]]),
                    positions={"q": [len(K) - 1], "k": cols})
        assert body["positions"]["q"][0] >= 131060
        check(got.json(), reference(body), max(TOL[dtype], 1e-9), f"step {step}")


def quantised(x, kv_dtype):
    if kv_dtype != "int8":
        return rnd(x, kv_dtype)
    x = x.to(torch.float32)
    scale = x.abs().amax(-1, keepdim=True) / 127
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    return (torch.round(x / safe) * scale).to(F64)


@pytest.mark.parametrize("kv_dtype", ["float32", "float16", "bfloat16", "int8"])
def test_float32_session_kv_dtype_rounding(attnd, kv_dtype):
    """K after bias and RoPE and V after bias are stored as kv_dtype (int8:
    one float32 scale max|x|/127 per head and row): the step equals the
    reference on those stored rows to float32's rounding."""
    rng = random.Random(kv_dtype)
    spec = {"d_k": 16, "d_v": 4, "heads": 2, "kv_heads": 1, "dtype": "float32",
            "kv_dtype": kv_dtype, "rope": {"pairs": "half", "dims": 8},
            "bias": {"k": mat(rng, 16), "v": mat(rng, 4)}}
    sid = attnd.post("/v1/sessions", spec).json()["id"]
    k, v = mat(rng, 1, 20, 16), mat(rng, 1, 20, 4)
    assert attnd.post(f"/v1/sessions/{sid}/kv", {"k": k, "v": v}).status == 200
    q = mat(rng, 2, 1, 16)
    got = attnd.post(f"/v1/sessions/{sid}/attention", {"q": q})
    assert got.status == 200, got
    K = apply_rope(torch.tensor(k, dtype=F64) + torch.tensor(spec["bias"]["k"], dtype=F64),
                   list(range(20)), spec["rope"])
    K = quantised(K, kv_dtype).repeat_interleave(2, 0)
    V = quantised(torch.tensor(v, dtype=F64) + torch.tensor(spec["bias"]["v"], dtype=F64),
                  kv_dtype).repeat_interleave(2, 0)
    s = apply_rope(torch.tensor(q, dtype=F64), [19], spec["rope"]) @ K.transpose(-1, -2) / 4
    p = torch.softmax(s, -1)
    check(got.json(), (s, p, p @ V), 3e-6, kv_dtype)


@pytest.mark.parametrize("dtype,kv_dtype", [
    ("float64", None), ("float32", None), ("float32", "int8"), ("float32", "bfloat16"),
    ("float16", None), ("float16", "int8"), ("bfloat16", None), ("bfloat16", "float32")])
def test_long_session_decode_kernels(attnd, dtype, kv_dtype):
    """2001 cached rows of d_k 72 and d_v 17 (no multiple of a vector's
    width), GQA, Llama 3.1's RoPE on 64 dims, per-head sinks, softcap: each
    decode step equals the reference on the rows as the cache stores them
    (a half session's own dtype, or its kv_dtype, after bias and RoPE)."""
    rng = random.Random(f"{dtype}{kv_dtype}")
    rope = dict(MODELS["llama31_131072"][0], dims=64)
    spec = {"d_k": 72, "d_v": 17, "heads": 4, "kv_heads": 2, "dtype": dtype, "rope": rope,
            "softmax": "sink", "sink_logit": [0.5, -1.0, 2.0, 0.0], "softcap": 30.0,
            "bias": {"k": mat(rng, 72), "v": mat(rng, 17)}}
    if kv_dtype:
        spec["kv_dtype"] = kv_dtype
    sid = attnd.post("/v1/sessions", spec).json()["id"]
    k, v = mat(rng, 2, 2001, 72), mat(rng, 2, 2001, 17)
    assert attnd.post(f"/v1/sessions/{sid}/kv", {"k": k, "v": v}).status == 200
    for step in range(3):
        q, k1, v1 = mat(rng, 4, 1, 72), mat(rng, 2, 1, 72), mat(rng, 2, 1, 17)
        got = attnd.post(f"/v1/sessions/{sid}/attention",
                         {"q": q, "k": k1, "v": v1, "return": ["output"]})
        assert got.status == 200, got
        k, v = [a + b for a, b in zip(k, k1)], [a + b for a, b in zip(v, v1)]
        L = len(k[0])
        K = rnd(torch.tensor(k, dtype=F64), dtype) + rnd(torch.tensor(spec["bias"]["k"],
                                                                      dtype=F64), dtype)
        V = rnd(torch.tensor(v, dtype=F64), dtype) + rnd(torch.tensor(spec["bias"]["v"],
                                                                      dtype=F64), dtype)
        K = apply_rope(K, list(range(L)), rope)
        stored = kv_dtype or (dtype if dtype in ("float16", "bfloat16") else None)
        if stored:
            K, V = quantised(K, stored), quantised(V, stored)
        Q = apply_rope(rnd(torch.tensor(q, dtype=F64), dtype), [L - 1], rope)
        s = Q @ K.repeat_interleave(2, 0).transpose(-1, -2) / math.sqrt(72)
        s = torch.tanh(s / 30.0) * 30.0
        sink = rnd(torch.tensor(spec["sink_logit"], dtype=F64), dtype)
        p = torch.softmax(torch.cat([s, sink[:, None, None]], -1), -1)[..., :-1]
        check(got.json(), (None, None, p @ V.repeat_interleave(2, 0)), TOL[dtype],
              f"step {step}", ("output",))


# ---- OIP v2 --------------------------------------------------------------------

def shape_of(x):
    return [len(x)] + shape_of(x[0]) if isinstance(x, list) else []


def flat(x):
    return [y for z in x for y in flat(z)] if isinstance(x, list) else [x]


def v2_request(body, heads=None):
    """body (/v1's) as OIP v2 inputs and flat parameters."""
    dt = V2_DT[body.get("dtype", "float64")]
    inputs = [{"name": x, "datatype": dt, "shape": shape_of(body[x]), "data": flat(body[x])}
              for x in "qkv"]
    params = {key: body[key] for key in ("causal", "scale", "softcap", "softmax", "alibi")
              if key in body}
    sink = body.get("sink_logit")
    if isinstance(sink, list):
        inputs.append({"name": "sink_logits", "datatype": dt, "shape": [len(sink)], "data": sink})
    elif sink is not None:
        params["sink_logit"] = sink
    params.update({"window_" + side: x for side, x in body.get("window", {}).items()})
    rope = body.get("rope")
    if rope is True or rope == {}:
        params["rope_base"] = 10000
    rope = rope if isinstance(rope, dict) else {}
    for key, x in rope.items():
        if key != "scaling":
            params["rope_" + key] = x
    for key, x in rope.get("scaling", {}).items():
        params["rope_scaling" if key == "type" else "rope_" + key] = x
    for group in ("positions", "segments"):
        for side, x in body.get(group, {}).items():
            inputs.append({"name": f"{group}_{side}", "datatype": "INT64",
                           "shape": shape_of(x), "data": flat(x)})
    for side, x in body.get("bias", {}).items():
        inputs.append({"name": "bias_" + side, "datatype": dt, "shape": shape_of(x),
                       "data": flat(x)})
    if "mask" in body:
        inputs.append({"name": "mask", "datatype": "BOOL", "shape": shape_of(body["mask"]),
                       "data": flat(body["mask"])})
    if heads:
        params["heads"] = ",".join(map(str, heads))
    return {"inputs": inputs, "parameters": params}


def v2_outputs(resp, dtype):
    out = {}
    for o in resp.json()["outputs"]:
        assert o["datatype"] == V2_DT[dtype], o["datatype"]
        out[o["name"]] = torch.tensor([math.nan if x is None else x for x in o["data"]],
                                      dtype=F64).reshape(o["shape"]).tolist()
    return out


@pytest.mark.parametrize("chunk", range(4))
def test_v2_random_requests_against_torch(attnd, chunk):
    for seed in range(chunk * 150, (chunk + 1) * 150):
        body, heads = random_body(seed)
        body.pop("attn_bias", None)
        r = attnd.post("/v2/models/attention/infer", v2_request(body, heads))
        if r.status == 400 and "needs more than 2 rotated dims" in r.body.decode():
            continue
        assert r.status == 200, (seed, r)
        want = reference(body)
        check(v2_outputs(r, body["dtype"]), sub_heads(want, heads) if heads else want,
              tol_of(body), f"seed {seed}")


@pytest.mark.parametrize("seed", range(12))
def test_v2_sequence_decoded_token_by_token(attnd, seed):
    """A sequence started with the model's settings as parameters (rope_*,
    sink_logits, window_left for a rolling one), then steps that repeat
    them or leave them out: each against the reference."""
    rng = random.Random(1000 + seed)
    spec = random_spec(rng)
    h, h_kv, d, d_v = spec["heads"], spec["kv_heads"], spec["d_k"], spec["d_v"]
    K, V = [[] for _ in range(h_kv)], [[] for _ in range(h_kv)]
    seq = 7000 + seed
    for step in range(12):
        m = rng.randint(1, 4) if step == 0 else rng.choice([1, 1, 2])
        q, k, v = mat(rng, h, rng.randint(1, m), d), mat(rng, h_kv, m, d), mat(rng, h_kv, m, d_v)
        for g in range(h_kv):
            K[g] += k[g]
            V[g] += v[g]
        body = stateless_of(spec, q, k, v)
        if step and rng.random() < 0.5:
            body = {"q": q, "k": k, "v": v, "causal": True, "dtype": spec["dtype"]}
        req = v2_request(body)
        req["parameters"].update(sequence_id=seq, sequence_start=step == 0,
                                 sequence_end=step == 11)
        held = attnd.get(f"/v1/sessions/v2i{seq}").json().get("held") if step else None
        got = attnd.post("/v2/models/attention/infer", req)
        assert got.status == 200, (step, got)
        scores, weights, output = reference(stateless_of(spec, q, K, V))
        if held is not None:
            cols = held_columns(held, m, len(K[0]))
            scores, weights = scores[..., cols], weights[..., cols]
        check(v2_outputs(got, spec["dtype"]), (scores, weights, output), TOL[spec["dtype"]],
              f"step {step}")

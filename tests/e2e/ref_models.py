"""tests/e2e/ref_models.py — a plain-Python float64 reference of DESIGN.md
part 2's attention, written apart from the C core: the order of operations
(bias, RoPE with dims and scalings, q.k, scale, softcap, attn_bias, ALiBi,
the allowed set of mask, causal, window and segments, the softmax variants
with per-head sinks), positions by default, within segments and explicit,
batches of independent elements. Sums use math.fsum, so the reference is
within an ulp or two of the exact value at these sizes.

ref(body) takes the same dict a client posts to /v1/attention (nested
arrays only) and returns {"scores", "weights", "output"} with the rank of q
(masked scores as None).
"""
import math


def _rank(m):
    r = 0
    while isinstance(m, list):
        r += 1
        m = m[0]
    return r


def inv_freqs(r, base, scaling):
    """The r/2 inverse frequencies of DESIGN.md's table."""
    half = r // 2
    f = [base ** (-2.0 * i / r) for i in range(half)]
    if not scaling:
        return f, 1.0
    t = scaling["type"]
    factor = scaling["factor"]
    if t == "linear":
        return [x / factor for x in f], 1.0
    if t == "ntk":
        b2 = base * factor ** (r / (r - 2))
        return [b2 ** (-2.0 * i / r) for i in range(half)], 1.0
    if t == "llama3":
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        M = scaling["original_max_position"]
        out = []
        for x in f:
            lam = 2 * math.pi / x
            if lam < M / high:
                out.append(x)
            elif lam > M / low:
                out.append(x / factor)
            else:
                s = (M / lam - low) / (high - low)
                out.append((1 - s) * x / factor + s * x)
        return out, 1.0
    if t == "yarn":
        M = scaling["original_max_position"]
        bf = scaling.get("beta_fast", 32.0)
        bs = scaling.get("beta_slow", 1.0)
        att = scaling.get("attention_factor", 0.1 * math.log(factor) + 1)

        def corr(x):
            return r * math.log(M / (2 * math.pi * x)) / (2 * math.log(base))
        # "truncate" (Hugging Face's, default true) rounds the range
        # outwards to whole dims; gpt-oss's false keeps it
        lo, hi = corr(bf), corr(bs)
        if scaling.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo = max(lo, 0)
        hi = min(hi, r - 1)
        if lo == hi:
            hi += 0.001
        out = []
        for i, x in enumerate(f):
            g = min(max((i - lo) / (hi - lo), 0.0), 1.0)
            out.append((x / factor) * g + x * (1 - g))
        return out, att
    raise ValueError(t)


def rotate(x, p, rope, d_k):
    """x (a list, rotated copy returned) at position p."""
    r = rope.get("dims", d_k)
    if r == 0:
        return list(x)
    f, att = inv_freqs(r, rope.get("base", 10000.0), rope.get("scaling"))
    y = list(x)
    half = r // 2
    for i in range(half):
        a, b = (2 * i, 2 * i + 1) if rope.get("pairs", "interleaved") == "interleaved" \
            else (i, i + half)
        c, s = math.cos(p * f[i]), math.sin(p * f[i])
        y[a] = x[a] * c - x[b] * s
        y[b] = x[a] * s + x[b] * c
    for i in range(r):
        y[i] *= att
    return y


def default_positions(n, L, causal, seg_q, seg_k):
    top = causal == "top_left"
    if seg_q is None:
        pk = list(range(L))
        pq = list(range(n)) if top else [L - n + i for i in range(n)]
        return pq, pk
    pk, seen = [], {}
    for s in seg_k:
        pk.append(seen.get(s, 0))
        seen[s] = seen.get(s, 0) + 1
    Ls = dict(seen)
    pq, seen = [], {}
    ns = {}
    for s in seg_q:
        ns[s] = ns.get(s, 0) + 1
    for s in seg_q:
        c = seen.get(s, 0)
        seen[s] = c + 1
        pq.append(c if top else Ls.get(s, 0) - ns[s] + c)
    return pq, pk


def _pick(arr, b):
    """A [len] or [B][len] list for batch element b (or None)."""
    if arr is None:
        return None
    return arr[b] if isinstance(arr[0], list) else arr


def _score_mat(m, b, h, H):
    """attn_bias / mask of rank 2..4 for batch b, head h."""
    if m is None:
        return None
    r = _rank(m)
    if r == 2:
        return m
    if r == 3:
        return m[h] if len(m) > 1 else m[0]
    mb = m[b] if len(m) > 1 else m[0]
    return mb[h] if len(mb) > 1 else mb[0]


def _bias(vec, head):
    if vec is None:
        return None
    return vec[head] if isinstance(vec[0], list) else vec


def ref(body):
    q, k, v = body["q"], body["k"], body["v"]
    rank = _rank(q)
    if rank == 2:
        q, k, v = [[q]], [[k]], [[v]]
    elif rank == 3:
        q, k, v = [q], [k], [v]
    B, H, n, d_k = len(q), len(q[0]), len(q[0][0]), len(q[0][0][0])
    Hk, L = len(k[0]), len(k[0][0])
    scale = body.get("scale", 1 / math.sqrt(d_k))
    causal = body.get("causal", False)
    if causal is True:
        causal = "bottom_right"
    bias = body.get("bias", {})
    rope = body.get("rope")
    if rope is True:
        rope = {}
    softcap = body.get("softcap")
    alibi = body.get("alibi")
    window = body.get("window")
    softmax = body.get("softmax", "standard")
    sink = body.get("sink_logit")
    pos = body.get("positions", {})
    seg = body.get("segments")
    out_s, out_w, out_o = [], [], []
    for b in range(B):
        sq = _pick(seg["q"], b) if seg else None
        sk = _pick(seg["k"], b) if seg else None
        pq, pk = default_positions(n, L, causal, sq, sk)
        if "q" in pos:
            pq = _pick(pos["q"], b)
        if "k" in pos:
            pk = _pick(pos["k"], b)
        bs, bw, bo = [], [], []
        for h in range(H):
            g = h * Hk // H
            bq, bk, bv = _bias(bias.get("q"), h), _bias(bias.get("k"), g), _bias(bias.get("v"), g)
            K, V = [], []
            for j in range(L):
                kj = [x + (bk[t] if bk else 0) for t, x in enumerate(k[b][g][j])]
                vj = [x + (bv[t] if bv else 0) for t, x in enumerate(v[b][g][j])]
                K.append(rotate(kj, pk[j], rope, d_k) if rope is not None else kj)
                V.append(vj)
            ab = _score_mat(body.get("attn_bias"), b, h, H)
            mk = _score_mat(body.get("mask"), b, h, H)
            if alibi:
                slope = alibi["slopes"][h] if isinstance(alibi, dict) else 2 ** (-8 * (h + 1) / H)
            hs, hw, ho = [], [], []
            for i in range(n):
                qi = [x + (bq[t] if bq else 0) for t, x in enumerate(q[b][h][i])]
                if rope is not None:
                    qi = rotate(qi, pq[i], rope, d_k)
                row, allowed = [], []
                for j in range(L):
                    s = scale * math.fsum(a * c for a, c in zip(qi, K[j]))
                    if softcap:
                        s = softcap * math.tanh(s / softcap)
                    ok = True
                    if ab is not None:
                        if ab[i][j] is None:
                            ok = False
                        else:
                            s += ab[i][j]
                    if alibi:
                        s -= slope * abs(pq[i] - pk[j])
                    if mk is not None and not mk[i][j]:
                        ok = False
                    if causal and pk[j] > pq[i]:
                        ok = False
                    if window is not None:
                        lo = window.get("left")
                        hi = window.get("right")
                        inside = (lo is None or pq[i] - lo <= pk[j]) and \
                                 (hi is None or pk[j] <= pq[i] + hi)
                        if not inside and not pk[j] < window.get("sinks", 0):
                            ok = False
                    if sq is not None and sq[i] != sk[j]:
                        ok = False
                    row.append(s)
                    allowed.append(ok)
                keep = [s for s, a in zip(row, allowed) if a]
                if softmax == "sink":
                    sl = sink[h] if isinstance(sink, list) else sink
                    m = max(keep + [sl])
                    extra = math.exp(sl - m)
                elif softmax == "softmax1":
                    m = max(keep + [0.0])
                    extra = math.exp(-m)
                else:
                    m = max(keep) if keep else 0.0
                    extra = 0.0
                e = [math.exp(s - m) if a else 0.0 for s, a in zip(row, allowed)]
                den = math.fsum(e) + extra
                w = [x / den if den > 0 else 0.0 for x in e]
                o = [math.fsum(w[j] * V[j][t] for j in range(L)) for t in range(len(V[0]))]
                hs.append([s if a else None for s, a in zip(row, allowed)])
                hw.append(w)
                ho.append(o)
            bs.append(hs)
            bw.append(hw)
            bo.append(ho)
        out_s.append(bs)
        out_w.append(bw)
        out_o.append(bo)
    if rank == 2:
        return {"scores": out_s[0][0], "weights": out_w[0][0], "output": out_o[0][0]}
    if rank == 3:
        return {"scores": out_s[0], "weights": out_w[0], "output": out_o[0]}
    return {"scores": out_s, "weights": out_w, "output": out_o}

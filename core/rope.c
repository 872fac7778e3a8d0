/*
 * core/rope.c — the rotary embedding's frequencies: which dims rotate, the inverse frequency of each
 * pair under every scaling, and YaRN's attention factor.
 *
 * With r rotated dims the plain inverse frequencies are f_i = base^(-2i/r),
 * i < r/2; a scaling changes them as the design's table says (the formulas
 * of Hugging Face's _compute_*_parameters, written here from the design):
 * linear divides by the factor, ntk raises the base, llama3 divides the
 * long wavelengths and blends the middle band, yarn blends interpolated and
 * extrapolated frequencies along a ramp between two correction dims
 * (rounded outwards to whole dims unless no_truncate, HF's "truncate":
 * false that gpt-oss uses). Each
 * frequency is computed on its own in double (no table), so a caller asks
 * for f_i once per pair and rotates all its rows with it. The rotation of
 * rows is in core/attn_impl.h (one copy per element type).
 */
#include "rope.h"

#include <math.h>

size_t attn_rope_dims(const struct attn_params *p, size_t d_k)
{
    if (p->rope_dims == ATTN_ROPE_DIMS_ZERO)
        return 0;
    return p->rope_dims ? p->rope_dims : d_k;
}

static bool pos_finite(double x)
{
    return isfinite(x) && x > 0;
}

enum core_status attn_rope_check(const struct attn_params *p, size_t d_k)
{
    if (!p->rope)
        return CORE_OK;
    size_t r = attn_rope_dims(p, d_k);
    if (r % 2 || r > d_k)
        return CORE_ESHAPE;
    const struct attn_rope_scaling *sc = &p->rope_scaling;
    if (sc->no_truncate && sc->type != ATTN_ROPE_SCALING_YARN)
        return CORE_EINVAL;             /* a yarn setting only */
    switch (sc->type) {
    case ATTN_ROPE_SCALING_NONE:
        return CORE_OK;
    case ATTN_ROPE_SCALING_LINEAR:
        return pos_finite(sc->factor) ? CORE_OK : CORE_EINVAL;
    case ATTN_ROPE_SCALING_NTK:
        /* base' = base·factor^(r/(r-2)) needs r > 2 */
        return pos_finite(sc->factor) && r > 2 ? CORE_OK : CORE_EINVAL;
    case ATTN_ROPE_SCALING_LLAMA3:
        return pos_finite(sc->factor) && pos_finite(sc->low_freq_factor) &&
                       pos_finite(sc->high_freq_factor) &&
                       sc->high_freq_factor > sc->low_freq_factor &&
                       pos_finite(sc->original_max_position)
                   ? CORE_OK
                   : CORE_EINVAL;
    case ATTN_ROPE_SCALING_YARN:
        /* the correction dims divide by ln base */
        if (!(p->rope_base > 1) || !pos_finite(sc->factor) ||
            !pos_finite(sc->original_max_position) ||
            !pos_finite(sc->beta_fast) || !pos_finite(sc->beta_slow) ||
            !isfinite(sc->attention_factor) || sc->attention_factor < 0)
            return CORE_EINVAL;
        return isfinite(attn_rope_mscale(p)) ? CORE_OK : CORE_EINVAL;
    }
    return CORE_EINVAL;
}

/* YaRN's correction dim of x rotations: r·ln(M/(2πx)) / (2 ln base). */
static double yarn_corr(double x, double r, double M, double base)
{
    return r * log(M / (2 * M_PI * x)) / (2 * log(base));
}

double attn_rope_inv_freq(const struct attn_params *p, size_t r, size_t i)
{
    const struct attn_rope_scaling *sc = &p->rope_scaling;
    double base = p->rope_base;
    if (sc->type == ATTN_ROPE_SCALING_NTK)
        base *= pow(sc->factor, (double)r / ((double)r - 2));
    /* the same expression as the plain RoPE of v1, so r = d_k without a
     * scaling rotates with the same bits */
    double f = pow(base, -2.0 * (double)i / (double)r);
    switch (sc->type) {
    case ATTN_ROPE_SCALING_NONE:
    case ATTN_ROPE_SCALING_NTK:
        return f;
    case ATTN_ROPE_SCALING_LINEAR:
        return f / sc->factor;
    case ATTN_ROPE_SCALING_LLAMA3: {
        double M = sc->original_max_position, lam = 2 * M_PI / f;
        double lo = sc->low_freq_factor, hi = sc->high_freq_factor;
        if (lam < M / hi)
            return f;
        if (lam > M / lo)
            return f / sc->factor;
        double t = (M / lam - lo) / (hi - lo);
        return (1 - t) * f / sc->factor + t * f;
    }
    case ATTN_ROPE_SCALING_YARN: {
        double M = sc->original_max_position, rd = (double)r;
        double lo = yarn_corr(sc->beta_fast, rd, M, base);
        double hi = yarn_corr(sc->beta_slow, rd, M, base);
        if (!sc->no_truncate) {
            lo = floor(lo);
            hi = ceil(hi);
        }
        lo = lo < 0 ? 0 : (lo > rd - 1 ? rd - 1 : lo);    /* both ends in [0, r-1] */
        hi = hi < 0 ? 0 : (hi > rd - 1 ? rd - 1 : hi);
        if (lo == hi)
            hi += 0.001;
        double g = ((double)i - lo) / (hi - lo);
        g = g < 0 ? 0 : (g > 1 ? 1 : g);
        return (f / sc->factor) * g + f * (1 - g);
    }
    }
    return f;
}

double attn_rope_mscale(const struct attn_params *p)
{
    const struct attn_rope_scaling *sc = &p->rope_scaling;
    if (sc->type != ATTN_ROPE_SCALING_YARN)
        return 1;
    return sc->attention_factor > 0 ? sc->attention_factor : 0.1 * log(sc->factor) + 1;
}

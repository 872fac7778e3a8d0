/*
 * core/rope.h — rotary embedding frequencies for core/attn.c (core/rope.c
 * says how each scaling is computed).
 */
#ifndef ATTND_CORE_ROPE_H
#define ATTND_CORE_ROPE_H

#include <stddef.h>

#include "attn.h"

/* Rotated dims r: p->rope_dims, or d_k when 0. */
size_t attn_rope_dims(const struct attn_params *p, size_t d_k);

/* p->rope's options for keys of width d_k: CORE_ESHAPE when r is odd or
 * above d_k, CORE_EINVAL for a bad scaling type or parameter (ntk needs
 * r > 2, llama3 high > low, yarn base > 1, no_truncate only with yarn).
 * CORE_OK when RoPE is off. */
enum core_status attn_rope_check(const struct attn_params *p, size_t d_k);

/* Inverse frequency of pair i < r/2 of r rotated dims, scaling applied. */
double attn_rope_inv_freq(const struct attn_params *p, size_t r, size_t i);

/* The factor on the rotated dims of q and k: YaRN's attention factor, else 1. */
double attn_rope_mscale(const struct attn_params *p);

#endif

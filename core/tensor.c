/*
 * core/tensor.c — element counts of borrowed tensors.
 *
 * The only non-inline tensor helper: the product of a shape, computed with
 * checked multiplication so an untrusted shape can never wrap around.
 */
#include "tensor.h"

bool attn_tensor_count(const struct attn_tensor *t, size_t *count)
{
    if (!t || t->rank < 1 || t->rank > ATTN_MAX_RANK)
        return false;
    size_t c = 1;
    for (int i = 0; i < t->rank; i++)
        if (!core_mul(c, t->shape[i], &c))
            return false;
    *count = c;
    return true;
}

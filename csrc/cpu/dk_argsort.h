/*
 * dk_argsort.h — stable argsorts by radix: scores in torch's descending order, and unsigned keys.
 *
 * Stable (equal keys keep index order), as torchvision's sorts promise where NMS breaks ties;
 * linear in n, scratch from the arena.
 */
#ifndef DK_ARGSORT_H
#define DK_ARGSORT_H

#include <stdbool.h>
#include <stdint.h>

#include "dk_arena.h"
#include "dk_status.h"

/*
 * Note [Sorting scores as torch does]
 * idx[0 .. n) = the items by decreasing key, ties in index order, in the order torch.sort(
 * descending=True) gives on the CPU: every NaN (whatever its sign or payload) first, as the
 * largest value, then +inf down to -inf, with -0.0 equal to +0.0. A least-significant-digit radix
 * sort of the keys mapped to integers that order the same way: linear in n and stable by
 * construction, where a comparison sort costs n log n calls. keys[i * stride] is item i's key.
 */
DK_API dk_status dk_argsort_desc_f32(int64_t *idx, const float *keys, int64_t stride, int64_t n, dk_arena *ar);
DK_API dk_status dk_argsort_desc_f64(int64_t *idx, const double *keys, int64_t stride, int64_t n, dk_arena *ar);

/* idx[0 .. n) reordered by ascending key[idx[i]]... precisely: the pairs (key[i], idx[i]) sorted
 * by key, stably (a radix sort; key is reordered along). */
DK_API dk_status dk_argsort_u64(int64_t *idx, uint64_t *key, int64_t n, dk_arena *ar);

#endif /* DK_ARGSORT_H */

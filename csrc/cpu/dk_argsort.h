/*
 * dk_argsort.h — stable argsort with a caller's comparison and context.
 *
 * The comparison sees item indices and the caller's context (the tensors it reads, strides, a
 * direction), so one sort serves any key: scores read through strides, boxes by area, a float16
 * tensor converted on the fly. Stable (equal keys keep index order), as torchvision's sorts
 * promise where NMS breaks ties; O(n log n) comparisons (merge sort), scratch from the arena.
 */
#ifndef DK_ARGSORT_H
#define DK_ARGSORT_H

#include <stdbool.h>
#include <stdint.h>

#include "dk_arena.h"
#include "dk_status.h"

/* Whether item a must come before item b; a strict order (false for equal keys). */
typedef bool (*dk_before_fn)(int64_t a, int64_t b, const void *ctx);

/* idx[0 .. n) = 0 .. n - 1 sorted by `before`, ties in index order. DK_ENOMEM when the arena
 * cannot hold n more indices. */
DK_API dk_status dk_argsort(int64_t *idx, int64_t n, dk_before_fn before, const void *ctx, dk_arena *ar);

#endif /* DK_ARGSORT_H */

/*
 * dk_gpu_pairs.cuh — the pairs of two sets of boxes behind a pairwise op's output (box_iou,
 * box_iou_rotated): one call's sizes and element strides, and the grid-stride loop (Note
 * [Grid-stride loops] in csrc/gpu/dk_gpu.h) that gives each thread the two boxes of each of its
 * output elements in the compute type. Every pair (i, j) of boxes1 [n, *] and boxes2 [m, *] goes
 * to out [n, m], or, aligned, every pair (i, i) to out [n]. Consecutive threads take consecutive
 * columns of one row: the row's box is one cached read for a whole warp, the column boxes are
 * adjacent, and a row-major output is stored coalesced. C++ (nvcc, hipcc, the emulation).
 */
#ifndef DK_GPU_PAIRS_CUH
#define DK_GPU_PAIRS_CUH

#include <stdbool.h>
#include <stdint.h>

#include "dk_tensor.h"
#include "dk_gpu.h"
#include "kernels/dk_hd.h"

typedef struct {
    int64_t n, m;
    int aligned;
    int64_t b1_s[2], b2_s[2], out_s[2]; /* element strides; out_s[1] unused when aligned */
} dk_gpu_pairs;

static inline dk_gpu_pairs dk_gpu_pairs_of(const dk_tensor *boxes1, const dk_tensor *boxes2, const dk_tensor *out,
                                           bool aligned)
{
    dk_gpu_pairs g;
    g.n = boxes1->shape[0];
    g.m = boxes2->shape[0];
    g.aligned = aligned;
    dk_tensor_strides(boxes1, g.b1_s, 2);
    dk_tensor_strides(boxes2, g.b2_s, 2);
    g.out_s[0] = dk_tensor_stride(out, 0);
    g.out_s[1] = aligned ? 0 : dk_tensor_stride(out, 1);
    return g;
}

/* Output elements: n m (both < 2^31, as the ops check: below 2^62), or n aligned. */
static inline int64_t dk_gpu_pairs_count(const dk_gpu_pairs *g) { return g->aligned ? g->n : g->n * g->m; }

/* For each of this thread's output elements: body(p, q, o) with boxes p of boxes1 and q of
 * boxes2, their D values each converted by load (storage -> V), and o the element's offset in
 * out. */
template <int D, class V, class S, class Load, class Body>
__device__ DK_INLINE void dk_gpu_for_pairs(const dk_gpu_pairs &g, const S *__restrict__ b1, const S *__restrict__ b2,
                                           Load load, Body body)
{
    const int64_t total = g.aligned ? g.n : g.n * g.m;
    for (int64_t k = DK_GPU_FIRST(); k < total; k += DK_GPU_STRIDE()) {
        const int64_t i = g.aligned ? k : k / g.m, j = g.aligned ? k : k % g.m;
        V p[D], q[D];
        for (int d = 0; d < D; d++) {
            p[d] = load(b1[i * g.b1_s[0] + d * g.b1_s[1]]);
            q[d] = load(b2[j * g.b2_s[0] + d * g.b2_s[1]]);
        }
        body(p, q, g.aligned ? i * g.out_s[0] : i * g.out_s[0] + j * g.out_s[1]);
    }
}

#endif /* DK_GPU_PAIRS_CUH */

/*
 * dk_gpu_tiles.h — the per-tile RoI lists of the deterministic gathers (roi_align's backward,
 * Note [Deterministic backward on a GPU]; the position-sensitive backwards, Note [RoIPool on a
 * GPU]): each image cut into tiles of tile x tile pixels, and for each tile the RoIs that can
 * reach it, in index order, so that a thread walks only those and still adds in the CPU's order.
 */
#ifndef DK_GPU_TILES_H
#define DK_GPU_TILES_H

#include <stdint.h>

#include "kernels/dk_hd.h"

/* The tiles' side: `fixed` when positive (a tunable), else 16, doubled while the lists (a RoI
 * index per tile and RoI, and a count per tile) would take more memory than grad_input's
 * `budget` bytes, so that their scratch stays within grad_input's size. */
static inline void dk_gpu_tiles_choose(int64_t N, int64_t H, int64_t W, int64_t K, double budget, int64_t fixed,
                                       int64_t *tile, int64_t *ty, int64_t *tx)
{
    const int64_t side = H > W ? H : W;
    *tile = fixed > 0 ? fixed : 16;
    for (;;) {
        *ty = (H + *tile - 1) / *tile;
        *tx = (W + *tile - 1) / *tile;
        if (fixed > 0 || *tile >= side || (double)N * (double)*ty * (double)*tx * ((double)K + 1) * 4.0 <= budget)
            break;
        *tile *= 2;
    }
}

/* lists[t * K ...] and counts[t] for every tile t of every image (t = (n * ty + y) * tx + x): the
 * RoIs k of image n whose reach [E::y0, E::y1] x [E::x0, E::x1] meets the tile, in index order.
 * One thread per tile, RoIs in order: the same lists on every run. E: a table entry with n, y0,
 * y1, x0, x1 (n < 0 or an empty reach: the RoI is in no list). */
template <class E>
__global__ void dk_gpu_tile_lists_kernel(const E *__restrict__ table, int64_t N, int64_t K, int64_t tile, int64_t ty,
                                         int64_t tx, int32_t *__restrict__ lists, int32_t *__restrict__ counts)
{
    const int64_t total = N * ty * tx;
    for (int64_t t = DK_GPU_FIRST(); t < total; t += DK_GPU_STRIDE()) {
        const int64_t x = t % tx, y = t / tx % ty, n = t / (tx * ty);
        const int64_t y0 = y * tile, y1 = y0 + tile - 1, x0 = x * tile, x1 = x0 + tile - 1;
        int32_t m = 0;
        for (int64_t k = 0; k < K; ++k) {
            const E *e = &table[k];
            if (e->n == n && e->y0 <= y1 && e->y1 >= y0 && e->x0 <= x1 && e->x1 >= x0) lists[t * K + m++] = (int32_t)k;
        }
        counts[t] = m;
    }
}

#endif /* DK_GPU_TILES_H */

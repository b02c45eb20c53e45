/*
 * roi_pool/roi_pool_cpu.h — what the CPU roi_pool kernel's entry points (roi_pool_cpu.c) and its
 * per-dtype bodies (roi_pool_tmpl.h) share.
 *
 * Note [RoIPool on a CPU]
 * Forward: one task per RoI and block of 16 channels: the RoI's geometry and each bin's bounds are
 * computed once and serve the block's channels (torchvision finds them once per RoI and loops the
 * channels innermost; finding them per channel cost a third of the time), and a plane with unit
 * column stride gets a loop the compiler sees as contiguous. Backward: one task per channel, which zeroes that
 * channel of grad_input in every image and then adds the gradients of every RoI in order (k, ph,
 * pw): channels are disjoint in grad_input, so the threads never meet, and each element receives
 * its additions in torchvision's CPU order, whatever the thread count: the same bits.
 *
 * Note [RoIAlign's position-sensitive form on a CPU]
 * ps_roi_align's forward is a task per RoI and block of 16 output channels: the RoI's two axes
 * are found once (torchvision finds them per output element), and each bin's sample taps once
 * for the block (torchvision's bilinear_interpolate finds them per sample and channel), the
 * column taps in a table of DK__PSA_TAPS (a larger grid, which only an explicit sampling_ratio
 * or a box far larger than the map gives, computes the rest per sample: the same values). A
 * channel's sum is dk_roi_align_forward_avg's, term by term and in order. The backward is a
 * task per (image, input channel) plane, which fixes the bin: the RoIs of the image in order,
 * their samples in order, each tap's share added where torchvision adds it, so each element of
 * grad_input gets torchvision's terms in torchvision's order on any number of threads, with no
 * two threads on one plane.
 */
#ifndef DK_ROI_POOL_CPU_H
#define DK_ROI_POOL_CPU_H

#include <stdint.h>

#include "dk_arena.h"
#include "dk_parallel.h"
#include "dk_tensor.h"
#include "kernels/roi_pool_math.h"
#include "roi_pool.h" /* ops/roi_pool.h */

typedef struct {
    const dk_tensor *img, *bins, *rois, *argmax; /* input or grad_input; output or grad_output */
    int64_t N, C, H, W, K, PH, PW;
    double scale;
    int bins_kind;             /* DK_ROI_POOL_BINS_* (kernels/roi_pool_math.h) */
    int64_t *ps_bins;          /* ps_roi_pool's backward: every RoI's bins (dk__rp_ps_bins) */
    int64_t sampling_ratio;    /* ps_roi_align */
    float *scratch;            /* ps_roi_align's 16-bit backward: a float H x W plane per thread */
    const void *table;         /* ps_roi_align's backward: every RoI's geometry (dk__psa_roi_entry) */
    const int64_t *image_rois; /* and each image's RoIs: N + 1 offsets into the K RoI numbers after them */
    dk_parallel_counter counter;
} dk__rp_ctx;

/* The batch index of RoI k, or -1 when it is not one of the N images (ops/roi_pool.c refuses
 * those where the host can read the RoIs; this keeps a kernel in bounds regardless). */
static inline int64_t dk__rp_batch(double b, int64_t n)
{
    return b >= 0 && b < (double)n && b == (double)(int64_t)b ? (int64_t)b : -1;
}

/* t's four strides, in elements. */
static inline void dk__rp_strides(const dk_tensor *t, int64_t s[4])
{
    for (int d = 0; d < 4; d++) s[d] = dk_tensor_stride(t, d);
}

/* ps_roi_align: the column taps a task keeps per bin (Note [RoIAlign's position-sensitive form
 * on a CPU]); an adaptive grid reaches it only for a bin over 64 pixels wide. */
#define DK__PSA_TAPS 64

#endif /* DK_ROI_POOL_CPU_H */

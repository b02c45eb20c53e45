/*
 * soft_nms_gpu.h — MMCV's soft_nms on CUDA and HIP (ops/nms.h), written once (Note [One source
 * for CUDA and HIP] in csrc/gpu/dk_gpu.h): what its kernels (soft_nms_gpu_tmpl.cuh) and launcher
 * (soft_nms_gpu.cu) share.
 *
 * Note [Soft-NMS on a GPU]
 * MMCV has no GPU soft_nms (it runs the CPU one), and its procedure (Note [Soft-NMS as MMCV runs
 * it] in csrc/cpu/nms/soft_nms_tmpl.h) is sequential: which of two equal scores is selected
 * depends on every earlier swap and removal. So one block runs the procedure, step by step, with
 * the work of each step spread over its threads; the results are the CPU kernel's, bit for bit
 * (same selections in the same order, same decayed scores: the per-element math is
 * kernels/nms_math.h's, in the same compute type). The live boxes are arrays in device memory
 * (x1, y1, x2, y2, area, score, index: the CPU kernel's), positions [i, n) live at step i. Each
 * thread owns a contiguous run of the positions after i (a blocked arrangement: a block-wide scan
 * over the threads' counts then orders the positions). Step i:
 *   1. thread 0 swaps position i with the selected position (from step i - 1's argmax);
 *   2. every thread decays the scores of its positions by their overlap with box i and counts
 *      the survivors (score not below min_score);
 *   3. a block-wide scan of the counts gives each thread the survivors before its run, and the
 *      new live count n' = i + 1 + survivors;
 *   4. MMCV's removals in place (a removed position takes the last live box, which is decayed
 *      next) amount to: survivors below n' stay, the holes below n' are filled in increasing
 *      order by the survivors at or above n' in decreasing order. Each hole writes its position
 *      into a slot indexed by its rank; after a barrier each survivor above n' moves to the slot
 *      of its rank. Reads (above n') and writes (holes below n') never meet;
 *   5. the argmax of the live scores for step i + 1, as the CPU's scan finds it: the first
 *      position of the largest non-NaN score, or position i + 1 itself when its score is NaN;
 *      each thread's candidate from its run (with the positions after the moves), reduced
 *      within each warp by shuffles, then across the warps through shared memory.
 * Per step that is O((n - i) / threads) work per thread and a few dozen barriers; the whole is
 * the references' O(n^2) comparisons, spread over one block. One block because every step
 * depends on the previous one: a grid would need a grid-wide barrier per step (cooperative
 * launches, which HIP and the emulation lack, or a launch per step: 3 launches x n steps).
 * Threads per block: the tunable soft_nms.gpu_threads (512; a power of two).
 * Scratch: the arrays and a slot per box, 8 values per box, one allocation on the stream. The
 * count stays on the device: num is written by the kernel, and dets/inds are written up to it
 * by a grid-stride kernel that reads it there (Note [Data-dependent output sizes] in ops/nms.h).
 */
#ifndef DK_SOFT_NMS_GPU_H
#define DK_SOFT_NMS_GPU_H

#include <stdint.h>

#include "dk_backend.h"
#include "dk_registry.h"
#include "dk_status.h"
#include "dk_tensor.h"
#include "nms.h" /* ops/nms.h */

/* The most threads of the procedure's block (the shared scan and reduction are sized to it). */
#define DK_SOFT_NMS_GPU_MAX_THREADS 1024

/* One call's parameters. */
typedef struct {
    int64_t n;
    double thr, sigma, min_score, offset;
    int method;
} dk__snms_gpu_args;

#ifdef __cplusplus
extern "C" {
#endif
dk_status dk_soft_nms_gpu(const dk_tensor *boxes, const dk_tensor *scores, dk_tensor *dets, dk_tensor *inds,
                          dk_tensor *num, double iou_threshold, double sigma, double min_score, int64_t method,
                          int64_t offset);
#ifdef __cplusplus
}
#endif

#endif /* DK_SOFT_NMS_GPU_H */

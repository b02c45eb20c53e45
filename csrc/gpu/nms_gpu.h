/*
 * nms_gpu.h — NMS on CUDA and HIP (ops/nms.h), written once (Note [One source for CUDA and HIP]
 * in csrc/gpu/dk_gpu.h): what its kernels (nms_gpu_tmpl.cuh) and launcher (nms_gpu.cu) share.
 *
 * Note [NMS on a GPU]
 * The references' greedy procedure, every decision theirs, in four steps that all stay on the
 * device:
 *   1. order: the boxes by decreasing score, as torch.sort(descending=True) (NaN first, ties by
 *      index): (kernels/sort_key.h key, index) pairs, padded to a power of two and sorted by a
 *      bitonic network, one launch per step (log2(P) (log2(P) + 1) / 2 launches; every pair is
 *      distinct, so the unstable network gives the stable order);
 *   2. the boxes (and categories) gathered in that order, in the compute type;
 *   3. the suppression mask in 64-box blocks, as torchvision's kernel: thread t of block (r, c)
 *      sets bit b of mask[row 64 r + t][word c] when sorted box 64 r + t would suppress sorted
 *      box 64 c + b, a later one (the overlap of kernels/box_math.h, compared in double, same
 *      category); the 64 boxes of the column block are staged in shared memory;
 *   4. the keep, gathered on the device by one block that walks the rows in order: a row not yet
 *      removed is kept (its original index appended to keep, the count in num) and ORs its mask
 *      row into the removed bits. Nothing of the mask goes to the host (torchvision before
 *      0.16 copied the whole N x N/64 mask back and walked it on the CPU).
 * Memory is bounded: the mask is made and consumed in chunks of rows (Note [Bounded NMS
 * memory]), so 100,000 boxes need about 6 MB plus one chunk, not the 1.25 GB of a full mask.
 * Only step 3's overlap is nms's own: the driver (dk__nms_gpu_run) and the mask kernel
 * (nms_gpu_mask.cuh, a template over the overlap) serve nms_rotated too (Note [Rotated NMS on a
 * GPU] in nms_rotated_gpu.h); categories of either op are gathered as kernels/sort_key.h's
 * dk_label_key keys.
 *
 * Note [Bounded NMS memory]
 * A full mask has N * ceil(N / 64) words: 1.25 GB at N = 100,000, 125 GB at a million. Steps 3
 * and 4 therefore run per chunk of rows, as many 64-row blocks as fit in the tunable
 * nms.gpu_chunk_bytes (64 MiB; at least one block): step 4 only ever needs the rows in order,
 * and a row's mask depends on nothing but the boxes. The removed bits (N / 8 bytes) carry over
 * from chunk to chunk. The rest is linear: keys and order (16 bytes per padded box), boxes
 * (4 or 5 compute values per box) and categories (8 bytes per box).
 */
#ifndef DK_NMS_GPU_H
#define DK_NMS_GPU_H

#include <stdint.h>

#include "dk_backend.h"
#include "dk_registry.h"
#include "dk_status.h"
#include "dk_tensor.h"
#include "nms.h" /* ops/nms.h */

/* Boxes per mask block: the bits of a word. */
#define DK_NMS_GPU_BLOCK 64
/* Threads of the gathering block (step 4). */
#define DK_NMS_GPU_GATHER_THREADS 256

#ifdef __cplusplus
extern "C" {
#endif
dk_status dk_nms_gpu(const dk_tensor *boxes, const dk_tensor *scores, const dk_tensor *idxs, dk_tensor *keep,
                     dk_tensor *num, double iou_threshold, int64_t offset);
#ifdef __cplusplus
}
#endif

#endif /* DK_NMS_GPU_H */

/*
 * nms_gpu.h — NMS on CUDA and HIP (ops/nms.h), written once (Note [One source for CUDA and HIP]
 * in csrc/gpu/dk_gpu.h): what its kernels (nms_gpu_tmpl.cuh) and launcher (nms_gpu.cu) share.
 *
 * Note [NMS on a GPU]
 * The references' greedy procedure, every decision theirs, in four steps that all stay on the
 * device:
 *   1. order: the boxes by decreasing score, as torch.sort(descending=True) (NaN first, ties by
 *      index): (kernels/sort_key.h key, index) pairs, padded to a power of two and sorted by a
 *      bitonic network (Note [NMS's bitonic sort]; every pair is distinct, so the unstable
 *      network gives the stable order);
 *   2. the boxes (and categories) gathered in that order, in the compute type;
 *   3. the suppression mask in 64-box blocks, as torchvision's kernel: thread t of block (r, c)
 *      sets bit b of mask[row 64 r + t][word c] when sorted box 64 r + t would suppress sorted
 *      box 64 c + b, a later one (the overlap of kernels/nms_math.h, compared in double, same
 *      category); the 64 boxes of the column block are staged in shared memory;
 *   4. the keep, gathered on the device by one block that walks the rows in order: a row not yet
 *      removed is kept (its original index appended to keep, the count in num) and ORs its mask
 *      row into the removed bits, 64 rows at a time (Note [NMS's keep, 64 rows at a time]).
 *      Nothing of the mask goes to the host (torchvision before 0.16 copied the whole N x N/64
 *      mask back and walked it on the CPU).
 * Memory is bounded: the mask is made and consumed in chunks of rows (Note [Bounded NMS
 * memory]), so 100,000 boxes need about 6 MB plus one chunk, not the 1.25 GB of a full mask.
 * Only step 3's overlap is nms's own: the driver (dk__nms_gpu_run) and the mask kernel
 * (nms_gpu_mask.cuh, a template over the overlap) serve nms_rotated too (Note [Rotated NMS on a
 * GPU] in nms_rotated_gpu.h); categories of either op are gathered as kernels/sort_key.h's
 * dk_label_key keys.
 *
 * Note [NMS's bitonic sort]
 * A bitonic network over P = 2^m elements is log2(P) (log2(P) + 1) / 2 steps (k, j), each
 * comparing elements j apart. One launch per step cost more than the rest of nms below 10,000
 * boxes (55 launches at 1,000 boxes, 1.3 ms against torchvision's 0.5 ms on an H100). Steps
 * with j < span (DK_NMS_GPU_SORT_SPAN = 1024 elements) compare within aligned spans of that
 * many elements, so one block stages its span in shared memory and runs all such consecutive
 * steps with a __syncthreads between them: the first launch sorts every span (k up to span),
 * and each later k takes one launch per step with j >= span plus one for the rest. 1,000 boxes
 * take 1 launch, 10,000 boxes 15, 100,000 boxes 36 (instead of 55, 105 and 153). The same
 * compare-exchanges in the same order: the same result.
 *
 * Note [NMS's keep, 64 rows at a time]
 * Walking the rows one by one takes two __syncthreads per box (the decision, then the OR of its
 * row) in the one block that step 4 is. A box's fate depends on the removed bits, which only
 * kept rows before it change; for the 64 rows of one block those are the rows of earlier
 * blocks (already ORed into removed[]) and the earlier rows of the same block, whose effect on
 * this block is one word each (the mask's diagonal word). So the block's threads load the 64
 * diagonal words and the rows' original indices into shared memory, thread 0 decides the 64 rows
 * in order in registers, and then all threads write the kept indices (each at its rank: a
 * popcount of the kept bits before it) and OR the kept rows into the later words: three
 * __syncthreads per 64 boxes, and the same decisions. (Thread 0 reading the indices from global
 * memory itself, one dependent load per kept box, made this kernel 270 us of a 1,000-box nms on
 * an H100.) The OR of the kept rows is spread over 1,024 threads: thread t takes one later word
 * and every s-th kept row (s = threads / words), its loads coalesced along the words and
 * independent of each other, and ORs its share in with one atomicOr; an OR's order does not
 * change it. On the H100 (2026-11-27) the earlier form, a thread per word walking the 64 rows
 * with a branch and a load each, took 180 us of a 1,000-box nms and 1.83 ms of a 10,000-box one
 * (11.6 us per 64 rows), against 22 us and 204 us for the whole mask. With the spread OR the
 * whole calls went from 0.54 / 1.95 / 46.3 ms to 0.49 / 1.43 / 27.5 ms at 1,000 / 10,000 /
 * 100,000 boxes (torchvision: 0.49 / 2.98 / 110 ms). nms_match keeps the earlier form: its
 * groups need the rows in order (Note [nms_match on a GPU]).
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
/* Threads of the gathering block (step 4): nms_match's, and nms's (whose ORs spread over them). */
#define DK_NMS_GPU_GATHER_THREADS 256
#define DK_NMS_GPU_KEEP_THREADS 1024
/* Note [NMS's bitonic sort]: elements one block sorts in shared memory, and its threads. */
#define DK_NMS_GPU_SORT_SPAN 1024
#define DK_NMS_GPU_SORT_THREADS 512

#ifdef __cplusplus
extern "C" {
#endif
dk_status dk_nms_gpu(const dk_tensor *boxes, const dk_tensor *scores, const dk_tensor *idxs, dk_tensor *keep,
                     dk_tensor *num, double iou_threshold, int64_t offset);
#ifdef __cplusplus
}
#endif

#endif /* DK_NMS_GPU_H */

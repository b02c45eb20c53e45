/*
 * deform_conv/deform_conv_cpu.h — what the CPU deform_conv2d's entry points (deform_conv_cpu.c)
 * and its per-dtype bodies (deform_conv_tmpl.h) share.
 *
 * Note [Deformable convolution on a CPU]
 * The product is im2col + GEMM, as torchvision's and MMCV's, but the column buffer has a fixed
 * cap instead of growing with the batch: torchvision's holds Cin kh kw x (up to 32 images) Ho Wo
 * elements and MMCV's im2col_step images (vision#2817, mmcv#661: batches past 32 crash or are
 * refused). Here a task is one image's block of output positions, sized so that its columns
 * (Cin kh kw x block, compute type) stay under DK__DC_COLUMN_BYTES, and each thread owns one
 * such buffer: the working set is a few buffers per thread, whatever the batch.
 *
 * Forward: a task fills its columns (per offset group and tap, each sample's corners are found
 * once, kernels/deform_conv_math.h, and serve every channel of the group), multiplies by each
 * group's weights (dk_sgemm; a plain loop for float64, which dk_sgemm does not take) and stores
 * the block with the bias. Tasks write disjoint outputs: any thread count gives the same bits.
 *
 * Backward: the grad columns W^T g of a block (dk_sgemm), then one pass that recomputes the
 * columns and, per sample, scatters the grad columns into grad_input's four corners, adds the
 * sample's y and x derivatives into grad_offset and its value into grad_mask; then grad_weight^T
 * += columns g^T (g transposed first: no operand of a product is read down its columns).
 * Scattering needs no atomics: the images are split into min(N, DK__DC_SLOTS) contiguous ranges
 * ("slots"), a slot is one task, so an image's grad_input (accumulated in the thread's
 * compute-type planes, then stored) is only ever touched by one thread; each slot sums
 * grad_weight and grad_bias into buffers of its own, which are added in slot order at the end.
 * The slots depend on the batch only, never on the threads, so every thread count gives the same
 * bits on every run (Note [Deterministic kernels]); the cost is at most DK__DC_SLOTS threads in
 * the backward, and one for one image.
 */
#ifndef DK_DEFORM_CONV_CPU_H
#define DK_DEFORM_CONV_CPU_H

#include <stdint.h>

#include "deform_conv.h" /* ops/deform_conv.h */
#include "dk_arena.h"
#include "dk_parallel.h"
#include "dk_tensor.h"
#include "kernels/deform_conv_math.h"

/* A column buffer's cap, and the backward's slots (Note [Deformable convolution on a CPU]). */
#define DK__DC_COLUMN_BYTES ((size_t)8 << 20)
#define DK__DC_SLOTS 16

typedef struct {
    /* forward: input, weight, offset, mask, bias, output; backward: grad_output in `out`,
     * and the gradients */
    const dk_tensor *input, *weight, *offset, *mask, *bias;
    const dk_tensor *out;
    dk_tensor *output, *grad_input, *grad_weight, *grad_offset, *grad_mask, *grad_bias;
    int64_t N, Cin, H, W, Cout, kh, kw, Ho, Wo, P; /* P = Ho Wo */
    int64_t sh, sw, ph, pw, dh, dw, groups, og;
    int geometry;                   /* DK_DEFORM_CONV_* (kernels/deform_conv_math.h); the forward's is 0 */
    int64_t K, Kg, Coutg, kk, cpog; /* Cin kh kw, K / groups, Cout / groups, kh kw, Cin / og */
    int64_t block, blocks;          /* output positions per task, tasks per image */
    int64_t slots;                  /* backward: image ranges */
    void *sums;                     /* backward: per slot, grad_weight and grad_bias */
    size_t slot_bytes;              /* of one slot's sums */
    void *wt;                       /* the weights, [Cout, Kg] contiguous, compute type */
    void *scratch;                  /* per thread (forward) or slot (backward) */
    size_t scratch_bytes;           /* of one thread's or slot's part */
    dk_parallel_counter counter;
} dk__dc_ctx;

#endif /* DK_DEFORM_CONV_CPU_H */

/*
 * focal_loss_gpu.h — the focal losses on CUDA and HIP (ops/focal_loss.h), written once (Note [One
 * source for CUDA and HIP] in csrc/gpu/dk_gpu.h): what its kernels (focal_loss_gpu_tmpl.cuh) and
 * launchers (focal_loss_gpu.cu) share.
 *
 * Note [Focal losses on a GPU]
 * The sigmoid loss: one thread per element (grid-stride, 64-bit indices) for the loss of every
 * element and for the backward. A reduced loss is the sum of Note [A deterministic sum]
 * (kernels/focal_loss_math.h): one block per chunk of DK_FOCAL_CHUNK elements, whose threads
 * compute the chunk's terms side by side (coalesced; fused, each element's gradient too: Note
 * [The backward in the forward] in ops/focal_loss.h) into shared memory; then four threads add
 * the four lanes in order, and one thread adds the chunks' sums in order. The softmax loss: one
 * thread per row (its maximum, log-sum-exp and, backward, its C gradients), and for a reduced
 * loss one block per chunk of DK_FOCAL_CHUNK_ROWS rows, a thread per row, summed the same way.
 * The elements' math is the CPU's, and the additions are the CPU's in the CPU's order, so (built
 * without contraction, Note [Exact GPU arithmetic]) the results are the CPU's bits where the
 * math library agrees (float: dkit's own polynomials; double: the device's exp and log1p); no
 * atomics, the same bits on every run. History: the first form gave each chunk to one thread,
 * which read its 4,096 elements alone (a warp's reads 16 KB apart) with 1,953 threads in all for
 * 100,000 x 80 logits: 3.3 ms for forward and backward on the H100, 0.33x torchvision's
 * composite; a block per chunk took 0.66 ms there, 2.88x (2026-11-27).
 */
#ifndef DK_FOCAL_LOSS_GPU_H
#define DK_FOCAL_LOSS_GPU_H

#include <stdint.h>

#include "dk_backend.h"
#include "dk_registry.h"
#include "dk_status.h"
#include "dk_tensor.h"
#include "focal_loss.h" /* ops/focal_loss.h */

#ifdef __cplusplus
/* One call's sizes, strides (elements) and scalars. */
typedef struct {
    int64_t N, C;
    int64_t x_s[2], t_s[2], w_s, out_s[2], go_s[2], gt_s[2], fused_s[2];
    double gamma, alpha_pos, alpha_neg, divisor;
    int reduction, kind, classes, want_dt;
} dk__fl_gpu_args;

extern "C" {
#endif
dk_status dk_sigmoid_focal_loss_forward_gpu(const dk_tensor *input, const dk_tensor *targets, const dk_tensor *weight,
                                            dk_tensor *output, dk_tensor *grad_input, double gamma, double alpha_pos,
                                            double alpha_neg, int64_t reduction, double divisor);
dk_status dk_sigmoid_focal_loss_backward_gpu(const dk_tensor *grad_output, const dk_tensor *input,
                                             const dk_tensor *targets, const dk_tensor *weight, dk_tensor *grad_input,
                                             dk_tensor *grad_targets, double gamma, double alpha_pos, double alpha_neg,
                                             int64_t reduction, double divisor);
dk_status dk_softmax_focal_loss_forward_gpu(const dk_tensor *input, const dk_tensor *targets, const dk_tensor *weight,
                                            dk_tensor *output, double gamma, double alpha, int64_t reduction,
                                            double divisor);
dk_status dk_softmax_focal_loss_backward_gpu(const dk_tensor *grad_output, const dk_tensor *input,
                                             const dk_tensor *targets, const dk_tensor *weight, dk_tensor *grad_input,
                                             double gamma, double alpha, int64_t reduction, double divisor);
#ifdef __cplusplus
}
#endif

#endif /* DK_FOCAL_LOSS_GPU_H */

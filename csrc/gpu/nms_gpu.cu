/*
 * nms_gpu.cu — NMS on CUDA and HIP (and on the host, for the tests): the entry point the backend
 * registers, and the driver it shares with nms_rotated (nms_gpu_mask.cuh): its scratch, and the
 * kernels that are not per dtype (the bitonic sort steps, the gathering of the keep). Note [NMS
 * on a GPU] in nms_gpu.h says how it works.
 */
#include "nms_gpu.h"

#include "dk_gpu_status.h"
#include "dk_tunables.h"
#include "dk_gpu.h"
#include "dk_gpu_kernels.h"
#include "kernels/box_math.h"
#include "kernels/sort_key.h"
#include "nms_gpu_mask.cuh"

/* Note [Bounded NMS memory]; small values make the tests cross chunk boundaries. */
DK_TUNABLE(dk__nms_gpu_chunk_bytes, "nms.gpu_chunk_bytes", (int64_t)64 << 20, 8, INT64_MAX,
           "NMS on a GPU: bytes of suppression mask made at once (at least one 64-row block)")

/* nms's own arguments (dk__nms_gpu_job.args). */
typedef struct {
    double thr, offset;
} dk__nms_gpu_args;

#define DK_TEMPLATE "nms_gpu_tmpl.cuh"
#define DK_TEMPLATE_TYPES (DK_TYPES_COMPUTE | DK_TYPES_FLOAT)
#include "kernels/dk_instantiate.h"

/* One step (k, j) of the bitonic network over P = 2^m (key, index) pairs, ascending. Pairs are
 * all distinct (indices are), so the result is the one total order. */
__global__ void dk__nms_gpu_bitonic_kernel(uint64_t *__restrict__ keys, int64_t *__restrict__ ord, int64_t P,
                                           int64_t k, int64_t j)
{
    for (int64_t i = DK_GPU_FIRST(); i < P; i += DK_GPU_STRIDE()) {
        const int64_t l = i ^ j;
        if (l <= i) continue;
        const bool up = (i & k) == 0;
        const bool after = keys[i] > keys[l] || (keys[i] == keys[l] && ord[i] > ord[l]);
        if (after == up) {
            const uint64_t tk = keys[i];
            keys[i] = keys[l];
            keys[l] = tk;
            const int64_t to = ord[i];
            ord[i] = ord[l];
            ord[l] = to;
        }
    }
}

/* Step 4 for rows [r0, r1) of the order, one block: a row not removed by a kept row before it is
 * kept. The count lives in num[0] from chunk to chunk; removed[] holds a bit per sorted box. */
__global__ void dk__nms_gpu_gather_keep_kernel(const uint64_t *__restrict__ mask, int64_t words, int64_t r0,
                                               int64_t r1, const int64_t *__restrict__ ord,
                                               uint64_t *__restrict__ removed, int64_t *__restrict__ keep,
                                               int64_t keep_s, int64_t *__restrict__ num)
{
    __shared__ int kept_row;
    int64_t count = num[0]; /* read by every thread: only thread 0 writes it, after the last row */
    for (int64_t i = r0; i < r1; i++) {
        if (threadIdx.x == 0) {
            kept_row = !((removed[i / 64] >> (i % 64)) & 1);
            if (kept_row) keep[count * keep_s] = ord[i];
        }
        __syncthreads();
        if (kept_row) {
            ++count;
            const uint64_t *row = mask + (i - r0) * words;
            for (int64_t w = i / 64 + (int64_t)threadIdx.x; w < words; w += (int64_t)blockDim.x) removed[w] |= row[w];
        }
        __syncthreads(); /* removed[] and kept_row are read again for the next row */
    }
    if (threadIdx.x == 0) num[0] = count;
}

/* Bytes of the scratch, one allocation: keys, order (P each), sorted boxes (width n compute
 * values), categories (n), removed bits (words), one chunk of mask (rows x words). */
typedef struct {
    size_t keys, ord, sorted, cls, removed, mask, total;
} dk__nms_gpu_layout;

static bool dk__add(size_t *acc, size_t a, size_t b)
{
    size_t p;
    if (__builtin_mul_overflow(a, b, &p)) return false;
    p = (p + 255) & ~(size_t)255; /* each part aligned for any element type */
    return !__builtin_add_overflow(*acc, p, acc);
}

static dk_status dk__nms_gpu_steps(const dk__nms_gpu_job *job, dk_tensor *keep, int64_t *numv, void *stream)
{
    const int64_t n = job->n;
    const bool f64 = dk_tensor_dtype(job->boxes) == DK_FLOAT64;
    int64_t P = 1;
    while (P < n) P *= 2;
    const int64_t words = (n + 63) / 64, blocks = words;
    /* rows of mask per chunk: whole 64-row blocks, at least one (Note [Bounded NMS memory]) */
    int64_t chunk_blocks = dk_tunable(&dk__nms_gpu_chunk_bytes) / (words * 8 * DK_NMS_GPU_BLOCK);
    if (chunk_blocks < 1) chunk_blocks = 1;
    if (chunk_blocks > blocks) chunk_blocks = blocks;
    if (chunk_blocks > 65535) chunk_blocks = 65535; /* gridDim.y */
    dk__nms_gpu_layout L = {0, 0, 0, 0, 0, 0, 0};
    size_t at = 0;
    bool ok = true;
    L.keys = at, ok = ok && dk__add(&at, (size_t)P, 8);
    L.ord = at, ok = ok && dk__add(&at, (size_t)P, 8);
    L.sorted = at, ok = ok && dk__add(&at, (size_t)n * (size_t)job->width, f64 ? sizeof(double) : sizeof(float));
    L.cls = at, ok = ok && dk__add(&at, job->cats ? (size_t)n : 0, 8);
    L.removed = at, ok = ok && dk__add(&at, (size_t)words, 8);
    L.mask = at, ok = ok && dk__add(&at, (size_t)(chunk_blocks * DK_NMS_GPU_BLOCK), (size_t)words * 8);
    L.total = at;
    if (!ok) return dk_error(DK_EINVAL, "%s: %lld boxes need more scratch than a size_t can count", job->op, (long long)n);
    void *mem = NULL;
    dk_status st = dk_device_alloc(job->boxes->device, L.total, &mem);
    if (st) return st;
    char *base = (char *)mem;
    uint64_t *keys = (uint64_t *)(base + L.keys);
    int64_t *ord = (int64_t *)(base + L.ord);
    uint64_t *cls = job->cats ? (uint64_t *)(base + L.cls) : (uint64_t *)NULL;
    uint64_t *removed = (uint64_t *)(base + L.removed);
    uint64_t *mask = (uint64_t *)(base + L.mask);
    void *sorted = base + L.sorted;

    /* 1. keys, and the bitonic network */
    DK_SWITCH_FLOAT(dk_tensor_dtype(job->scores), st, dk__nms_gpu_keys, (job, P, keys, ord, stream), (void)0)
    for (int64_t k = 2; !st && k <= P; k *= 2)
        for (int64_t j = k / 2; j > 0; j /= 2)
            DK_GPU_LAUNCH(dk__nms_gpu_bitonic_kernel, dk_gpu_blocks(P), DK_GPU_THREADS, stream, keys, ord, P, k, j);
    /* 2. boxes (and categories) in score order */
    if (!st) DK_SWITCH_FLOAT(dk_tensor_dtype(job->boxes), st, dk__nms_gpu_gather, (job, ord, sorted, cls, stream), (void)0)
    if (!st && dkgMemsetAsync(removed, 0, (size_t)words * 8, (dkgStream_t)stream) != dkgSuccess)
        st = dk__gpu_launched(job->op);

    /* 3 and 4, chunk by chunk */
    int64_t *keepv = (int64_t *)dk_tensor_data(keep);
    const int64_t keep_s = dk_tensor_stride(keep, 0);
    for (int64_t rb0 = 0; !st && rb0 < blocks; rb0 += chunk_blocks) {
        const int64_t nb = blocks - rb0 < chunk_blocks ? blocks - rb0 : chunk_blocks;
        st = job->mask[f64](job, sorted, cls, words, rb0, nb, mask, stream);
        if (st) break;
        const int64_t r0 = rb0 * DK_NMS_GPU_BLOCK, r1 = (rb0 + nb) * DK_NMS_GPU_BLOCK < n ? (rb0 + nb) * DK_NMS_GPU_BLOCK : n;
        DK_GPU_LAUNCH(dk__nms_gpu_gather_keep_kernel, 1, DK_NMS_GPU_GATHER_THREADS, stream, mask, words, r0, r1, ord,
                      removed, keepv, keep_s, numv);
        st = dk__gpu_launched(job->op);
    }
    dk_device_free(job->boxes->device, mem); /* stream-ordered: after the kernels above */
    return st;
}

dk_status dk__nms_gpu_run(const dk__nms_gpu_job *job, dk_tensor *keep, dk_tensor *num)
{
    const dk_dtype dt = dk_tensor_dtype(job->boxes);
    if (dt != DK_FLOAT32 && dt != DK_FLOAT64 && dt != DK_FLOAT16 && dt != DK_BFLOAT16)
        return dk__gpu_unsupported(job->op, job->boxes);
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, job->boxes->device);
    if (st) return st;
    void *stream = dk_current_stream(job->boxes->device);
    int64_t *numv = (int64_t *)dk_tensor_data(num);
    if (dkgMemsetAsync(numv, 0, sizeof *numv, (dkgStream_t)stream) != dkgSuccess) st = dk__gpu_launched(job->op);
    else if (job->n > 0) st = dk__nms_gpu_steps(job, keep, numv, stream);
    dk_device_guard_exit(&g);
    return st;
}

extern "C" dk_status dk_nms_gpu(const dk_tensor *boxes, const dk_tensor *scores, const dk_tensor *idxs,
                                dk_tensor *keep, dk_tensor *num, double iou_threshold, int64_t offset)
{
    const dk__nms_gpu_args a = {iou_threshold, (double)offset};
    const dk__nms_gpu_job job = {"nms", boxes, scores, idxs, boxes->shape[0], 4, &a,
                                 {dk__nms_gpu_mask_f32, dk__nms_gpu_mask_f64}};
    return dk__nms_gpu_run(&job, keep, num);
}

/* Note [GPU kernels register themselves] in dk_gpu_kernels.h */
DK_GPU_KERNEL(nms, dk_nms_gpu);

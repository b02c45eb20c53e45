/*
 * nms_gpu.cu — NMS on CUDA and HIP (and on the host, for the tests): the entry point the backend
 * registers, and the driver it shares with nms_match and nms_rotated (nms_gpu_mask.cuh): its scratch, and the
 * kernels that are not per dtype (the bitonic sort steps, the gathering of the keep). Note [NMS
 * on a GPU] in nms_gpu.h says how it works.
 */
#include "nms_gpu.h"

#include "dk_gpu_status.h"
#include "dk_tunables.h"
#include "dk_gpu.h"
#include "dk_gpu_kernels.h"
#include "kernels/nms_math.h"
#include "kernels/sort_key.h"
#include "nms_gpu_mask.cuh"

/* Note [Bounded NMS memory]; small values make the tests cross chunk boundaries. */
DK_TUNABLE(dk__nms_gpu_chunk_bytes, "nms.gpu_chunk_bytes", (int64_t)64 << 20, 8, INT64_MAX,
           "NMS on a GPU: bytes of suppression mask made at once (at least one 64-row block)")

/* nms's own arguments (dk__nms_gpu_job.args). */
typedef struct {
    double thr, offset;
} dk__nms_gpu_args;

#define DK_TEMPLATE "nms/nms_gpu_tmpl.cuh"
#define DK_TEMPLATE_TYPES (DK_TYPES_COMPUTE | DK_TYPES_FLOAT)
#include "kernels/dk_instantiate.h"

/* Note [NMS's bitonic sort]: (key, index) pairs in ascending order; pairs are all distinct
 * (indices are), so the network's result is the one total order. */
__device__ DK_INLINE bool dk__nms_gpu_after(uint64_t ka, int64_t oa, uint64_t kb, int64_t ob)
{
    return ka > kb || (ka == kb && oa > ob);
}

/* One compare-exchange of the network: pairs i < l leave in ascending order when up, else
 * descending. */
__device__ DK_INLINE void dk__nms_gpu_exchange(uint64_t *keys, int64_t *ord, int64_t i, int64_t l, bool up)
{
    if (dk__nms_gpu_after(keys[i], ord[i], keys[l], ord[l]) != up) return;
    const uint64_t tk = keys[i];
    keys[i] = keys[l];
    keys[l] = tk;
    const int64_t to = ord[i];
    ord[i] = ord[l];
    ord[l] = to;
}

/* One step (k, j) of the network over the whole array, for j >= DK_NMS_GPU_SORT_SPAN: the pairs
 * are farther apart than one block's span. */
__global__ void dk__nms_gpu_bitonic_kernel(uint64_t *__restrict__ keys, int64_t *__restrict__ ord, int64_t P, int64_t k,
                                           int64_t j)
{
    for (int64_t i = DK_GPU_FIRST(); i < P; i += DK_GPU_STRIDE()) {
        const int64_t l = i ^ j;
        if (l > i) dk__nms_gpu_exchange(keys, ord, i, l, (i & k) == 0);
    }
}

/* Every step (k, j) with k from k0 to k1 (doubling) and j < span, where span = min(P,
 * DK_NMS_GPU_SORT_SPAN) elements are one block's: steps k0 start at j0, later ones at k / 2. The
 * block's span is staged in shared memory, and each step is one __syncthreads, not one launch. */
__global__ void dk__nms_gpu_bitonic_local_kernel(uint64_t *__restrict__ keys, int64_t *__restrict__ ord, int64_t P,
                                                 int64_t k0, int64_t k1, int64_t j0)
{
    __shared__ uint64_t sk[DK_NMS_GPU_SORT_SPAN];
    __shared__ int64_t so[DK_NMS_GPU_SORT_SPAN];
    const int64_t span = P < DK_NMS_GPU_SORT_SPAN ? P : DK_NMS_GPU_SORT_SPAN;
    for (int64_t base = (int64_t)blockIdx.x * span; base < P; base += (int64_t)gridDim.x * span) {
        for (int64_t t = threadIdx.x; t < span; t += blockDim.x) sk[t] = keys[base + t], so[t] = ord[base + t];
        __syncthreads();
        for (int64_t k = k0; k <= k1; k *= 2)
            for (int64_t j = k == k0 ? j0 : k / 2; j > 0; j /= 2) {
                for (int64_t t = threadIdx.x; t < span / 2; t += blockDim.x) {
                    const int64_t i = 2 * j * (t / j) + t % j; /* the pair's lower element */
                    dk__nms_gpu_exchange(sk, so, i, i + j, ((base + i) & k) == 0);
                }
                __syncthreads();
            }
        for (int64_t t = threadIdx.x; t < span; t += blockDim.x) keys[base + t] = sk[t], ord[base + t] = so[t];
        __syncthreads(); /* the next span overwrites the shared arrays */
    }
}

/* Step 4 for rows [r0, r1) of the order (r0 a multiple of 64), one block, 64 rows at a time
 * (Note [NMS's keep, 64 rows at a time]). The count lives in num[0] from chunk to chunk;
 * removed[] holds a bit per sorted box. */
/* Set bits of x (a portable popcount: the same code on every runtime and in the emulation). */
__device__ DK_INLINE int64_t dk__nms_gpu_bits(uint64_t x)
{
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (int64_t)((x * 0x0101010101010101ull) >> 56);
}

/* The boxes of `fresh` (bits of word `word`) join group g (nms_match: grp[sorted box] = g). */
__device__ DK_INLINE void dk__nms_gpu_join(uint64_t *grp, int64_t word, uint64_t fresh, int64_t g)
{
    for (; fresh; fresh &= fresh - 1) grp[word * 64 + dk__nms_gpu_bits((fresh & (0 - fresh)) - 1)] = (uint64_t)g;
}

/* keep == NULL and grp set: nms_match (Note [nms_match on a GPU]): no keep, but each box's group,
 * the rank of the kept box that removes it, recorded as it is removed. */
__global__ void dk__nms_gpu_gather_keep_kernel(const uint64_t *__restrict__ mask, int64_t words, int64_t r0, int64_t r1,
                                               const int64_t *__restrict__ ord, uint64_t *__restrict__ removed,
                                               int64_t *__restrict__ keep, int64_t keep_s, int64_t *__restrict__ num,
                                               uint64_t *__restrict__ grp)
{
    __shared__ uint64_t diag[64];
    __shared__ int64_t rows_ord[64];
    __shared__ int kept_rows[64];
    __shared__ uint64_t kept_bits;
    __shared__ int64_t count;
    if (threadIdx.x == 0) count = num[0];
    for (int64_t rb = r0 / 64; rb * 64 < r1; rb++) {
        const int64_t rows = r1 - rb * 64 < 64 ? r1 - rb * 64 : 64;
        /* the block's own word of each of its rows (which later rows of the block it removes)
         * and the rows' original indices, loaded in parallel: thread 0's loop below then reads
         * nothing but shared memory */
        for (int64_t t = threadIdx.x; t < rows; t += blockDim.x) {
            diag[t] = mask[(rb * 64 + t - r0) * words + rb];
            rows_ord[t] = ord[rb * 64 + t];
        }
        __syncthreads();
        if (threadIdx.x == 0) { /* the 64 decisions, in order, in registers */
            /* removed[rb] may have been ORed by atomics (below): read where they were made */
            uint64_t w = grp ? removed[rb] : atomicOr((unsigned long long *)&removed[rb], 0ull), kept = 0;
            int64_t g = count;
            int nk = 0;
            for (int64_t b = 0; b < rows; b++) {
                if ((w >> b) & 1) continue;
                kept |= (uint64_t)1 << b;
                kept_rows[nk++] = (int)b;
                if (grp) dk__nms_gpu_join(grp, rb, ((uint64_t)1 << b) | (diag[b] & ~w), g++);
                w |= diag[b];
            }
            removed[rb] = w;
            kept_bits = kept;
        }
        __syncthreads();
        const uint64_t kept = kept_bits;
        const int64_t c0 = count;
        /* the kept rows' indices, each at its rank among them */
        for (int64_t t = threadIdx.x; t < rows && keep; t += blockDim.x)
            if ((kept >> t) & 1) keep[(c0 + dk__nms_gpu_bits(kept & (((uint64_t)1 << t) - 1))) * keep_s] = rows_ord[t];
        const int64_t w0 = rb + 1, nw = words - w0, nk = dk__nms_gpu_bits(kept);
        if (kept && !grp && nw > 0) {
            /* Note [NMS's keep, 64 rows at a time]: the kept rows remove boxes of later blocks.
             * An OR's order does not matter: thread t takes word w0 + t % nw and every s-th kept
             * row from t / nw, s = the threads per word, so the loads (coalesced along the words)
             * are spread over the whole block, and each thread's share is ORed in with one
             * atomic. Where there are more words than threads, a thread takes several words. */
            const int64_t s = (int64_t)blockDim.x > nw ? (int64_t)blockDim.x / nw : 1;
            for (int64_t t = threadIdx.x; t < s * nw; t += blockDim.x) {
                const int64_t w = w0 + t % nw;
                uint64_t acc = 0;
                for (int64_t i = t / nw; i < nk; i += s) acc |= mask[(rb * 64 + kept_rows[i] - r0) * words + w];
                if (acc) atomicOr((unsigned long long *)&removed[w], (unsigned long long)acc);
            }
        } else if (kept && grp) /* nms_match: in row order, the first kept row to reach a box takes it */
            for (int64_t w = w0 + (int64_t)threadIdx.x; w < words; w += (int64_t)blockDim.x) {
                uint64_t acc = removed[w];
                int64_t g = c0;
                for (int64_t b = 0; b < rows; b++) {
                    if (!((kept >> b) & 1)) continue;
                    const uint64_t m = mask[(rb * 64 + b - r0) * words + w];
                    dk__nms_gpu_join(grp, w, m & ~acc, g++);
                    acc |= m;
                }
                removed[w] = acc;
            }
        __syncthreads(); /* count, removed[] and the shared rows are read above: written below and next */
        if (threadIdx.x == 0) count = c0 + nk;
    }
    if (threadIdx.x == 0) num[0] = count;
}

/* Bytes of the scratch, one allocation: keys, order (P each), sorted boxes (width n compute
 * values), categories (n), removed bits (words), one chunk of mask (rows x words). */
typedef struct {
    size_t keys, ord, sorted, cls, removed, mask, gkeys, gord, total;
} dk__nms_gpu_layout;

/* nms_match's groups, after step 4 (Note [nms_match on a GPU]): the (group, sorted position)
 * pairs, padded to P with keys above every group, to be sorted. */
__global__ void dk__nms_gpu_group_keys_kernel(uint64_t *__restrict__ gkeys, int64_t *__restrict__ gord, int64_t n,
                                              int64_t P)
{
    for (int64_t i = DK_GPU_FIRST(); i < P; i += DK_GPU_STRIDE()) {
        if (i >= n) gkeys[i] = UINT64_MAX;
        gord[i] = i;
    }
}

/* ... and, sorted, the members (original indices) and where each group starts. */
__global__ void dk__nms_gpu_groups_kernel(const uint64_t *__restrict__ gkeys, const int64_t *__restrict__ gord,
                                          const int64_t *__restrict__ ord, int64_t n, int64_t *__restrict__ members,
                                          int64_t ms, int64_t *__restrict__ starts, int64_t ss)
{
    for (int64_t k = DK_GPU_FIRST(); k < n; k += DK_GPU_STRIDE()) {
        members[k * ms] = ord[gord[k]];
        if (k == 0 || gkeys[k] != gkeys[k - 1]) starts[(int64_t)gkeys[k] * ss] = k;
    }
}

static bool dk__add(size_t *acc, size_t a, size_t b)
{
    size_t p;
    if (__builtin_mul_overflow(a, b, &p)) return false;
    p = (p + 255) & ~(size_t)255; /* each part aligned for any element type */
    return !__builtin_add_overflow(*acc, p, acc);
}

/* Note [NMS's bitonic sort]: the network over P = 2^m pairs in 1 + 2 log2(P / span) + (log2(P /
 * span) (log2(P / span) + 1)) / 2 launches. */
static dk_status dk__nms_gpu_sort(uint64_t *keys, int64_t *ord, int64_t P, void *stream, const char *op)
{
    const int64_t span = P < DK_NMS_GPU_SORT_SPAN ? P : DK_NMS_GPU_SORT_SPAN;
    if (P < 2) return DK_OK;
    /* a block per span, up to the grid's cap (then blocks take several spans in turn) */
    const unsigned spans = P / span < DK_GPU_MAX_BLOCKS ? (unsigned)(P / span) : DK_GPU_MAX_BLOCKS;
    DK_GPU_LAUNCH(dk__nms_gpu_bitonic_local_kernel, spans, DK_NMS_GPU_SORT_THREADS, stream, keys, ord, P, (int64_t)2,
                  span, (int64_t)1);
    dk_status st = dk__gpu_launched(op);
    for (int64_t k = 2 * span; !st && k <= P; k *= 2) {
        for (int64_t j = k / 2; j >= span; j /= 2)
            DK_GPU_LAUNCH(dk__nms_gpu_bitonic_kernel, dk_gpu_blocks(P), DK_GPU_THREADS, stream, keys, ord, P, k, j);
        DK_GPU_LAUNCH(dk__nms_gpu_bitonic_local_kernel, spans, DK_NMS_GPU_SORT_THREADS, stream, keys, ord, P, k, k,
                      span / 2);
        st = dk__gpu_launched(op);
    }
    return st;
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
    dk__nms_gpu_layout L = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    size_t at = 0;
    bool ok = true;
    L.keys = at, ok = ok && dk__add(&at, (size_t)P, 8);
    L.ord = at, ok = ok && dk__add(&at, (size_t)P, 8);
    L.sorted = at, ok = ok && dk__add(&at, (size_t)n * (size_t)job->width, f64 ? sizeof(double) : sizeof(float));
    L.cls = at, ok = ok && dk__add(&at, job->cats ? (size_t)n : 0, 8);
    L.removed = at, ok = ok && dk__add(&at, (size_t)words, 8);
    L.mask = at, ok = ok && dk__add(&at, (size_t)(chunk_blocks * DK_NMS_GPU_BLOCK), (size_t)words * 8);
    L.gkeys = at, ok = ok && dk__add(&at, job->starts ? (size_t)P : 0, 8);
    L.gord = at, ok = ok && dk__add(&at, job->starts ? (size_t)P : 0, 8);
    L.total = at;
    if (!ok)
        return dk_error(DK_EINVAL, "%s: %lld boxes need more scratch than a size_t can count", job->op, (long long)n);
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
    uint64_t *gkeys = job->starts ? (uint64_t *)(base + L.gkeys) : (uint64_t *)NULL;
    int64_t *gord = (int64_t *)(base + L.gord);

    /* 1. keys, and the bitonic network */
    DK_SWITCH_FLOAT(dk_tensor_dtype(job->scores), st, dk__nms_gpu_keys, (job, P, keys, ord, stream), (void)0)
    if (!st) st = dk__nms_gpu_sort(keys, ord, P, stream, job->op);
    /* 2. boxes (and categories) in score order */
    if (!st)
        DK_SWITCH_FLOAT(dk_tensor_dtype(job->boxes), st, dk__nms_gpu_gather, (job, ord, sorted, cls, stream), (void)0)
    if (!st && dkgMemsetAsync(removed, 0, (size_t)words * 8, (dkgStream_t)stream) != dkgSuccess)
        st = dk__gpu_launched(job->op);

    /* 3 and 4, chunk by chunk */
    int64_t *keepv = job->starts ? (int64_t *)NULL : (int64_t *)dk_tensor_data(keep); /* nms_match: groups below */
    const int64_t keep_s = dk_tensor_stride(keep, 0);
    for (int64_t rb0 = 0; !st && rb0 < blocks; rb0 += chunk_blocks) {
        const int64_t nb = blocks - rb0 < chunk_blocks ? blocks - rb0 : chunk_blocks;
        st = job->mask[f64](job, sorted, cls, words, rb0, nb, mask, stream);
        if (st) break;
        const int64_t r0 = rb0 * DK_NMS_GPU_BLOCK,
                      r1 = (rb0 + nb) * DK_NMS_GPU_BLOCK < n ? (rb0 + nb) * DK_NMS_GPU_BLOCK : n;
        DK_GPU_LAUNCH(dk__nms_gpu_gather_keep_kernel, 1,
                      job->starts ? DK_NMS_GPU_GATHER_THREADS : DK_NMS_GPU_KEEP_THREADS, stream, mask, words, r0, r1,
                      ord, removed, keepv, keep_s, numv, gkeys);
        st = dk__gpu_launched(job->op);
    }
    /* nms_match: the (group, position) pairs in order give the members group by group, each in
     * score order (Note [nms_match on a GPU]) */
    if (!st && gkeys) {
        DK_GPU_LAUNCH(dk__nms_gpu_group_keys_kernel, dk_gpu_blocks(P), DK_GPU_THREADS, stream, gkeys, gord, n, P);
        st = dk__gpu_launched(job->op);
        if (!st) st = dk__nms_gpu_sort(gkeys, gord, P, stream, job->op);
        if (!st) {
            DK_GPU_LAUNCH(dk__nms_gpu_groups_kernel, dk_gpu_blocks(n), DK_GPU_THREADS, stream, gkeys, gord, ord, n,
                          (int64_t *)dk_tensor_data(keep), keep_s, (int64_t *)dk_tensor_data(job->starts),
                          dk_tensor_stride(job->starts, 0));
            st = dk__gpu_launched(job->op);
        }
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

extern "C" dk_status dk_nms_gpu(const dk_tensor *boxes, const dk_tensor *scores, const dk_tensor *idxs, dk_tensor *keep,
                                dk_tensor *num, double iou_threshold, int64_t offset)
{
    const dk__nms_gpu_args a = {iou_threshold, (double)offset};
    const dk__nms_gpu_job job = {
        "nms", boxes, scores, idxs, boxes->shape[0], 4, &a, {dk__nms_gpu_mask_f32, dk__nms_gpu_mask_f64}, NULL};
    return dk__nms_gpu_run(&job, keep, num);
}

/* Note [GPU kernels register themselves] in dk_gpu_kernels.h */
DK_GPU_KERNEL(nms, dk_nms_gpu);

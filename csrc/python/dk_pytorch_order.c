/*
 * dk_pytorch_order.c — dkit._C.torch_sort_ties_: dkit's kept indices in the order torchvision's
 * batched_nms gives for many boxes, where equal scores come in torch.sort's unstable order.
 *
 * dkit's NMS returns the kept boxes by decreasing score with equal scores by index. torchvision's
 * batched_nms on the CPU, past 1,000 boxes, gathers the kept indices in ascending order and sorts
 * their scores with torch.sort(descending=True), which is std::sort: equal scores then come as
 * its partitions leave them (Note [torch's order of equal scores] in csrc/cpu/dk_std_sort.h). That
 * order follows from the kept scores alone, so it is computed here from dkit's result, in about
 * the time of one pass over the scores, instead of running torch's sort (a third to a half of
 * the NMS itself: Note [torchvision's order of equal scores] in dkit/compat/torchvision.py).
 *
 * Both tensors are taken as an op's arguments are (dk_py_dlpack_import: a torch tensor read
 * directly, anything else through DLPack, in the order of Note [Conversion order]), which for two
 * torch tensors costs well under a microsecond where their __dlpack__ took 22 us (torch 1.13's
 * asks for max_version and raises TypeError first). scores are only read; keep is reordered in place, and
 * only where equal scores move: the caller (the compat entry) owns the keep that dkit's NMS has
 * just returned, so a new result of K int64s and a copy of keep into it would only cost time (a
 * 158 KB block and its copy per call on 20,000 boxes). Nothing is written before every check has
 * passed, so a refused call leaves keep as it was.
 */
#include "dk_py.h" /* first: Python.h must precede every system header (CPython's rule) */

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DK__ORDER_AVX2 1
#else
#define DK__ORDER_AVX2 0
#endif

#include "dk_pydlpack.h"
#include "dk_std_sort.h"
#include "kernels/dk_half.h"

#define DK__OP "torch_sort_ties_"

static int dk__is_scores_dtype(DLDataType d)
{
    if (d.lanes != 1) return 0;
    if (d.code == kDLFloat) return d.bits == 16 || d.bits == 32 || d.bits == 64;
    return d.code == kDLBfloat && d.bits == 16;
}

/*
 * A score as an integer key whose order is torch's descending comparison (KeyValueCompDesc)
 * reversed: a comes strictly before b exactly when key(a) > key(b), and equal keys are the
 * scores that comparison cannot tell apart. So NaN (which it puts first, and never tells apart)
 * is the largest key, -0.0 and +0.0 share one, and the rest is the usual map of an IEEE number's
 * bits onto an unsigned integer of the same order (negative: all bits flipped; positive: the
 * sign bit set). float16 and bfloat16 scores are exact as floats, so they take float's keys. One
 * integer comparison then replaces two NaN tests per step, and the map has no branch.
 */
static inline uint64_t dk__key_bits32(uint32_t u)
{
    const uint32_t a = u & 0x7fffffffu;
    uint32_t k = u ^ ((uint32_t)((int32_t)u >> 31) | 0x80000000u);
    k = a == 0 ? 0x80000000u : k;            /* -0.0 as +0.0 */
    return a > 0x7f800000u ? UINT32_MAX : k; /* every NaN */
}
static inline uint64_t dk__key_f32(const void *p)
{
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return dk__key_bits32(u);
}
static inline uint64_t dk__key_bf16(const void *p) { return dk__key_bits32((uint32_t) * (const uint16_t *)p << 16); }
static inline uint64_t dk__key_f16(const void *p)
{
    const float f = dk_half_to_float(*(const uint16_t *)p);
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return dk__key_bits32(u);
}
static inline uint64_t dk__key_f64(const void *p)
{
    uint64_t u;
    memcpy(&u, p, sizeof u);
    const uint64_t a = u & ~((uint64_t)1 << 63);
    uint64_t k = u ^ ((uint64_t)((int64_t)u >> 63) | (uint64_t)1 << 63);
    k = a == 0 ? (uint64_t)1 << 63 : k;
    return a > 0x7ff0000000000000u ? UINT64_MAX : k;
}

/*
 * Scratch for one call: rank_of [N], then rank, tied, tied_index and within [K], uint32 each,
 * and dk_std_sort_ties' own. Kept in the module state between calls up to DK__SCRATCH_KEPT: a
 * fresh block of this size is faulted in page by page on every call (glibc gives it back to the
 * system on free), which cost more than the computation itself (0.6 ms of 0.7 for 12,000 kept
 * scores, measured here). The GIL is held throughout, so one block serves every thread.
 */
#define DK__SCRATCH_KEPT ((size_t)16 << 20)

static void *dk__scratch(dk_py_state *s, size_t bytes)
{
    if (bytes <= s->order_scratch_bytes) return s->order_scratch;
    void *p = malloc(bytes);
    if (!p) return NULL;
    free(s->order_scratch);
    s->order_scratch = p;
    s->order_scratch_bytes = bytes;
    return p;
}

void dk_py_torch_order_clear(dk_py_state *s)
{
    free(s->order_scratch);
    s->order_scratch = NULL;
    s->order_scratch_bytes = 0;
}

/* A kept index out of range, or kept scores out of torch's order: -1 with the exception. */
#define DK__CHECK_INDEX(idx, i)                                                                               \
    if ((idx) < 0 || (idx) >= total) {                                                                        \
        dk_py_raise_fmt(s, DK_EINVAL, DK__OP ": keep[%lld] = %lld is not an index of scores", (long long)(i), \
                        (long long)(idx));                                                                    \
        return -1;                                                                                            \
    }
#define DK__CHECK_ORDER(key, prev, i)                                                                            \
    if ((key) > (prev)) {                                                                                        \
        dk_py_raise_fmt(s, DK_EINVAL, DK__OP ": keep is not in decreasing score order at %lld", (long long)(i)); \
        return -1;                                                                                               \
    }

/*
 * Eight kept places at a time, for float32 scores of unit stride with AVX2: whether places
 * i .. i + 7 of keep (kp, from place i) hold indices of scores whose keys fall strictly below
 * *prev and below one another, the usual case; then *prev becomes the last key and, where
 * rank_of is given, each index's rank (its place) is written. False when any is out of range,
 * out of order or equal to the one before (or *prev is no float32 key): the caller then takes
 * those places one at a time, with its checks and messages. The keys are dk__key_bits32's, with
 * the top bit flipped so that signed comparisons order them; an index is checked before its
 * score is gathered.
 */
static inline bool dk__distinct8_none(const int64_t *kp, const char *base, int64_t total, int64_t i, uint64_t *prev,
                                      uint32_t *rank_of)
{
    (void)kp, (void)base, (void)total, (void)i, (void)prev, (void)rank_of;
    return false;
}
#if DK__ORDER_AVX2
__attribute__((target("avx2"))) static bool dk__distinct8_f32(const int64_t *kp, const char *base, int64_t total,
                                                              int64_t i, uint64_t *prev, uint32_t *rank_of)
{
    const __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)kp);
    const __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(kp + 4));
    const __m256i none = _mm256_set1_epi64x(-1), lim = _mm256_set1_epi64x(total);
    const __m256i in = _mm256_and_si256(_mm256_and_si256(_mm256_cmpgt_epi64(x0, none), _mm256_cmpgt_epi64(lim, x0)),
                                        _mm256_and_si256(_mm256_cmpgt_epi64(x1, none), _mm256_cmpgt_epi64(lim, x1)));
    if (_mm256_movemask_epi8(in) != -1) return false;
    const __m256i u = _mm256_castps_si256(
        _mm256_set_m128(_mm256_i64gather_ps((const float *)(const void *)base, x1, 4),
                        _mm256_i64gather_ps((const float *)(const void *)base, x0, 4)));
    const __m256i top = _mm256_set1_epi32(INT32_MIN), a = _mm256_andnot_si256(top, u);
    __m256i key = _mm256_xor_si256(u, _mm256_or_si256(_mm256_srai_epi32(u, 31), top));
    key = _mm256_blendv_epi8(key, top, _mm256_cmpeq_epi32(a, _mm256_setzero_si256()));         /* -0.0 as +0.0 */
    key = _mm256_blendv_epi8(key, none, _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000))); /* every NaN */
    const __m256i sk = _mm256_xor_si256(key, top);
    const int32_t p = *prev > UINT32_MAX ? INT32_MAX : (int32_t)((uint32_t)*prev ^ 0x80000000u);
    const __m256i before = _mm256_blend_epi32(
        _mm256_permutevar8x32_epi32(sk, _mm256_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6)), _mm256_set1_epi32(p), 1);
    if (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(before, sk))) != 0xff) return false;
    *prev = (uint32_t)_mm256_extract_epi32(key, 7);
    if (rank_of)
        for (int l = 0; l < 8; l++) rank_of[kp[l]] = (uint32_t)(i + l);
    return true;
}
#else
#define dk__distinct8_f32 dk__distinct8_none
#endif

/* The first pass, which writes nothing: where the first kept score equal to the one before it
 * is (k when none is: most calls, with distinct scores, end here, right after the NMS has filled
 * the caches with other data), checking the indices and the order up to there; -1 with an
 * exception. One loop per dtype over the scores alone. */
#define DK__SCAN(name, key_of, distinct8)                                                                \
    static int64_t name(dk_py_state *s, const int64_t *kp, int64_t kstride, int64_t k, const char *base, \
                        int64_t stride, int64_t total, bool vec)                                         \
    {                                                                                                    \
        uint64_t prev = UINT64_MAX;                                                                      \
        for (int64_t i = 0; i < k; i++) {                                                                \
            if (vec && i + 8 <= k && distinct8(kp + i, base, total, i, &prev, NULL)) {                   \
                i += 7;                                                                                  \
                continue;                                                                                \
            }                                                                                            \
            const int64_t idx = kp[i * kstride];                                                         \
            DK__CHECK_INDEX(idx, i)                                                                      \
            const uint64_t key = key_of(base + idx * stride);                                            \
            DK__CHECK_ORDER(key, prev, i)                                                                \
            if (i > 0 && key == prev) return i;                                                          \
            prev = key;                                                                                  \
        }                                                                                                \
        return k;                                                                                        \
    }
DK__SCAN(dk__scan_f64, dk__key_f64, dk__distinct8_none)
DK__SCAN(dk__scan_f32, dk__key_f32, dk__distinct8_f32)
DK__SCAN(dk__scan_f16, dk__key_f16, dk__distinct8_none)
DK__SCAN(dk__scan_bf16, dk__key_bf16, dk__distinct8_none)

/* The rest, only when scores tie, `from` (>= 0) being where the first run of equal scores starts:
 * every kept index's rank, the place in dkit's order where its score's run of equal scores
 * starts, with DK__SHARED set when that run holds more than one, into rank_of [total] (UINT32_MAX
 * where not kept; total < 2^31, so the bit is free). Before `from` the scan has checked
 * everything and the scores are distinct, so a rank is the place; from there the checks go on
 * with the ranks. 0, or -1 with an exception. An index kept twice has its place written twice,
 * which the caller's pass over rank_of finds (fewer places than kept indices): no test per index. */
#define DK__SHARED ((uint32_t)1 << 31)
static int dk__kept_twice(dk_py_state *s, int64_t idx)
{
    dk_py_raise_fmt(s, DK_EINVAL, DK__OP ": index %lld is kept twice", (long long)idx);
    return -1;
}
#define DK__RANKS(name, key_of, distinct8)                                                                           \
    static int name(dk_py_state *s, const int64_t *kp, int64_t kstride, int64_t k, const char *base, int64_t stride, \
                    int64_t total, int64_t from, uint32_t *rank_of, bool vec)                                        \
    {                                                                                                                \
        for (int64_t i = 0; i < from; i++) {                                                                         \
            const int64_t idx = kp[i * kstride];                                                                     \
            rank_of[idx] = (uint32_t)i;                                                                              \
        }                                                                                                            \
        uint32_t r = 0;                                                                                              \
        uint64_t prev = UINT64_MAX;                                                                                  \
        int64_t last = -1;                                                                                           \
        for (int64_t i = from; i < k; i++) {                                                                         \
            if (vec && i + 8 <= k && distinct8(kp + i, base, total, i, &prev, rank_of)) {                            \
                i += 7;                                                                                              \
                r = (uint32_t)i;                                                                                     \
                last = kp[i];                                                                                        \
                continue;                                                                                            \
            }                                                                                                        \
            const int64_t idx = kp[i * kstride];                                                                     \
            DK__CHECK_INDEX(idx, i)                                                                                  \
            const uint64_t key = key_of(base + idx * stride);                                                        \
            DK__CHECK_ORDER(key, prev, i)                                                                            \
            if (i > from && key == prev) {                                                                           \
                rank_of[last] |= DK__SHARED;                                                                         \
                rank_of[idx] = r | DK__SHARED;                                                                       \
            } else {                                                                                                 \
                r = (uint32_t)i;                                                                                     \
                rank_of[idx] = r;                                                                                    \
            }                                                                                                        \
            prev = key;                                                                                              \
            last = idx;                                                                                              \
        }                                                                                                            \
        return 0;                                                                                                    \
    }
DK__RANKS(dk__ranks_f64, dk__key_f64, dk__distinct8_none)
DK__RANKS(dk__ranks_f32, dk__key_f32, dk__distinct8_f32)
DK__RANKS(dk__ranks_f16, dk__key_f16, dk__distinct8_none)
DK__RANKS(dk__ranks_bf16, dk__key_bf16, dk__distinct8_none)

/* Index idx's place in the ascending order (r: its rank_of entry): none when not kept; the rank,
 * and where it is shared the place and the index among the tied ones. */
static inline void dk__asc_place(uint32_t r, int64_t idx, uint32_t *rank, int64_t *j, uint32_t *tied,
                                 uint32_t *tied_index, int64_t *ntied)
{
    if (r == UINT32_MAX) return;
    if (r & DK__SHARED) {
        tied[*ntied] = (uint32_t)*j;
        tied_index[(*ntied)++] = (uint32_t)idx;
    }
    rank[(*j)++] = r & ~DK__SHARED;
}

/* torch_sort_ties_(keep, scores) -> bool */
static PyObject *dk__torch_sort_ties(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = dk_py_state_of_module(m);
    if (n != 2) return dk_py_raise_fmt(s, DK_ETYPE, DK__OP "(keep, scores) takes two tensors");
    dk_py_owners owners;
    owners.n = owners.nviews = owners.nstreams = 0;
    PyObject *result = NULL;
    /* Note [Conversion order]: a producer whose reading runs Python code first; then, if Python
     * code ran after a pointer was read, that pointer checked again */
    DLTensor *ts[2] = {NULL, NULL};
    static const char *const names[2] = {"keep", "scores"};
    int read = 0, risky = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < 2; i++) {
            if (dk_py_dlpack_reads_late(s, args[i]) != pass) continue;
            int ran_python = 0;
            const int rc = dk_py_dlpack_import(s, args[i], i == 0, DK__OP, names[i], &owners, &ts[i], &ran_python);
            if (rc < 0) goto out;
            if (rc == DK_PY_ABSTRACT) {
                dk_py_raise_fmt(s, DK_EINVAL, DK__OP ": %s is a meta tensor; keep and scores must be CPU tensors",
                                names[i]);
                goto out;
            }
            risky |= ran_python && read > 0;
            read++;
        }
    for (int i = 0; risky && i < 2; i++)
        if (dk_py_dlpack_recheck(s, args[i], ts[i], DK__OP, names[i]) < 0) goto out;
    const DLTensor *keep = ts[0], *scores = ts[1];
    if (keep->device.device_type != kDLCPU || scores->device.device_type != kDLCPU) {
        dk_py_raise_fmt(s, DK_EINVAL,
                        DK__OP ": keep and scores must be CPU tensors (torch's CPU sort is the one copied)");
        goto out;
    }
    if (keep->ndim != 1 || keep->dtype.code != kDLInt || keep->dtype.bits != 64 || keep->dtype.lanes != 1) {
        dk_py_raise_fmt(s, DK_EINVAL, DK__OP ": keep must be a 1-D int64 tensor");
        goto out;
    }
    if (scores->ndim != 1 || !dk__is_scores_dtype(scores->dtype)) {
        dk_py_raise_fmt(s, DK_EINVAL, DK__OP ": scores must be a 1-D float16, bfloat16, float32 or float64 tensor");
        goto out;
    }
    const int64_t k = keep->shape[0], total = scores->shape[0];
    if (k > total || total >= ((int64_t)1 << 32)) {
        dk_py_raise_fmt(s, DK_EINVAL, DK__OP ": %lld kept indices of %lld scores", (long long)k, (long long)total);
        goto out;
    }
    const int64_t kstride = keep->strides ? keep->strides[0] : 1;
    const int64_t *kp = (const int64_t *)((const char *)keep->data + keep->byte_offset);

    const int64_t sstride = (scores->strides ? scores->strides[0] : 1) * (scores->dtype.bits / 8);
    const char *sbase = (const char *)scores->data + scores->byte_offset;
    /* which dtype: 0 float64, 1 float32, 2 bfloat16, 3 float16 (dk__is_scores_dtype admitted it) */
    const int which = scores->dtype.bits == 64          ? 0
                      : scores->dtype.bits == 32        ? 1
                      : scores->dtype.code == kDLBfloat ? 2
                                                        : 3;
    /* Both passes are instantiated per dtype: their loops are the hot ones. float32 scores of unit
     * stride are read eight at a time where the CPU has AVX2 (dk__distinct8_f32). */
#if DK__ORDER_AVX2
    const bool vec = which == 1 && kstride == 1 && sstride == 4 && __builtin_cpu_supports("avx2");
#else
    const bool vec = false;
#endif
    const int64_t first_tie = which == 0   ? dk__scan_f64(s, kp, kstride, k, sbase, sstride, total, vec)
                              : which == 1 ? dk__scan_f32(s, kp, kstride, k, sbase, sstride, total, vec)
                              : which == 2 ? dk__scan_bf16(s, kp, kstride, k, sbase, sstride, total, vec)
                                           : dk__scan_f16(s, kp, kstride, k, sbase, sstride, total, vec);
    if (first_tie < 0) goto out;
    if (first_tie == k) { /* no two kept scores are equal: dkit's order is torch's */
        result = Py_NewRef(Py_False);
        goto out;
    }

    /* Scratch: rank_of [N], then rank, tied, tied_index and within [K], uint32 each, and
     * dk_std_sort_ties' own. */
    const size_t rank_of_bytes = ((size_t)total * sizeof(uint32_t) + 7) / 8 * 8;
    const size_t k_u32_bytes = ((size_t)k * sizeof(uint32_t) + 7) / 8 * 8;
    char *base = dk__scratch(s, rank_of_bytes + 4 * k_u32_bytes + dk_std_sort_ties_scratch_bytes(k));
    if (!base) {
        PyErr_NoMemory();
        goto out;
    }
    uint32_t *rank_of = (uint32_t *)base; /* an index's rank (| DK__SHARED); UINT32_MAX: not kept */
    uint32_t *rank = (uint32_t *)(base + rank_of_bytes);
    uint32_t *tied = (uint32_t *)((char *)rank + k_u32_bytes);
    uint32_t *tied_index = (uint32_t *)((char *)tied + k_u32_bytes);
    uint32_t *within = (uint32_t *)((char *)tied_index + k_u32_bytes);
    void *sort_scratch = (char *)within + k_u32_bytes;

    memset(rank_of, 0xff, (size_t)total * sizeof *rank_of);
    const int64_t from = first_tie - 1;
    const int ranked = which == 0   ? dk__ranks_f64(s, kp, kstride, k, sbase, sstride, total, from, rank_of, vec)
                       : which == 1 ? dk__ranks_f32(s, kp, kstride, k, sbase, sstride, total, from, rank_of, vec)
                       : which == 2 ? dk__ranks_bf16(s, kp, kstride, k, sbase, sstride, total, from, rank_of, vec)
                                    : dk__ranks_f16(s, kp, kstride, k, sbase, sstride, total, from, rank_of, vec);
    if (ranked < 0) goto out;
    /* The ranks of the kept indices in ascending order, as torchvision hands them to torch.sort;
     * where a rank is shared, the place in that order and the index (total < 2^32). */
    int64_t j = 0, ntied = 0, idx = 0;
    /* Eight places at a time where none is unkept or shared (both have the top bit set: most
     * blocks, as most boxes are kept and few scores tie), one at a time elsewhere. */
    for (; idx + 8 <= total; idx += 8) {
        uint32_t top = 0;
        for (int l = 0; l < 8; l++) top |= rank_of[idx + l];
        if (!(top & DK__SHARED)) {
            memcpy(rank + j, rank_of + idx, 8 * sizeof *rank);
            j += 8;
        } else
            for (int64_t i = idx; i < idx + 8; i++) dk__asc_place(rank_of[i], i, rank, &j, tied, tied_index, &ntied);
    }
    for (; idx < total; idx++) dk__asc_place(rank_of[idx], idx, rank, &j, tied, tied_index, &ntied);
    if (j != k) { /* an index was kept twice, so its place was written twice: which one */
        memset(rank_of, 0xff, (size_t)total * sizeof *rank_of);
        for (int64_t i = 0; i < k; i++) {
            const int64_t twice = kp[i * kstride];
            if (rank_of[twice] != UINT32_MAX) {
                dk__kept_twice(s, twice);
                goto out;
            }
            rank_of[twice] = 0;
        }
    }
    const dk_status st = dk_std_sort_ties(within, rank, k, tied, ntied, sort_scratch);
    if (st != DK_OK) {
        dk_py_raise(s, st);
        goto out;
    }
    /* A score's run starts where dkit's order puts it (its rank), and torch's order differs only
     * inside the runs of equal scores: dkit's indices, with each tied one moved to its place in
     * its run. The tied ones fill their runs' places exactly, and everything has been read. */
    int64_t *o = (int64_t *)(void *)((char *)keep->data + keep->byte_offset);
    for (int64_t t = 0; t < ntied; t++) o[(rank[tied[t]] + within[t]) * kstride] = tied_index[t];
    result = Py_NewRef(Py_True);
out:
    if (s->order_scratch_bytes > DK__SCRATCH_KEPT) dk_py_torch_order_clear(s);
    dk_py_owners_release(&owners);
    return result;
}

static PyMethodDef dk__functions[] = {
    {"torch_sort_ties_", DK_PY_FASTCALL(dk__torch_sort_ties), METH_FASTCALL,
     "torch_sort_ties_(keep, scores) -> bool: reorders keep (int64 [K], indices of scores [N] in decreasing "
     "score order, equal scores by index: dkit's NMS result) in place into the order torch.sort(descending=True) "
     "on the CPU gives the same indices taken in ascending order; False, with keep untouched, when no two kept "
     "scores are equal (then the orders agree). Note [torch's order of equal scores] in csrc/cpu/dk_std_sort.h."},
    {NULL, NULL, 0, NULL},
};

int dk_py_torch_order_init(PyObject *module) { return PyModule_AddFunctions(module, dk__functions); }

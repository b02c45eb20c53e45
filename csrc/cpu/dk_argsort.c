/* dk_argsort.c — stable argsorts by radix (dk_argsort.h): float keys in torch's descending order,
 * and 64-bit unsigned keys. */
#include "dk_argsort.h"

#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Radix sort of float keys (Note [Sorting scores as torch does])                              */

/* An unsigned integer that orders ascending as the key orders descending. */
static inline uint32_t dk__desc_key_f32(float f)
{
    uint32_t u;
    if (f != f) return 0; /* NaN: first */
    if (f == 0) f = 0;    /* -0.0 ties with +0.0 */
    memcpy(&u, &f, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending as the float */
    return ~u + 1u; /* descending; 0 is left for NaN (the largest float maps to 1 at least) */
}

static inline uint64_t dk__desc_key_f64(double f)
{
    uint64_t u;
    if (f != f) return 0;
    if (f == 0) f = 0;
    memcpy(&u, &f, sizeof u);
    u = (u & 0x8000000000000000u) ? ~u : (u | 0x8000000000000000u);
    return ~u + 1u;
}

/* Stable LSD radix sort of (key, index) pairs by key, `bits` bits of key, 11 bits a pass. A
 * pass whose digit is the same in every key would move nothing and is skipped (class labels
 * below 2^11 take one pass of the six, scores in [0, 1) all three); the passes alternate between
 * the arrays and the buffers, with one copy at the end when the result is in the buffers. */
#define DK__RADIX_BITS 11
#define DK__RADIX (1 << DK__RADIX_BITS)

static void dk__radix_u64(uint64_t *key, int64_t *idx, uint64_t *k2, int64_t *i2, int64_t n, int bits)
{
    int64_t count[DK__RADIX];
    uint64_t differ = 0;
    for (int64_t i = 1; i < n; i++) differ |= key[i] ^ key[0];
    uint64_t *ks = key, *kd = k2;
    int64_t *is = idx, *id = i2;
    for (int shift = 0; shift < bits; shift += DK__RADIX_BITS) {
        if (!((differ >> shift) & (DK__RADIX - 1))) continue;
        memset(count, 0, sizeof count);
        for (int64_t i = 0; i < n; i++) count[(ks[i] >> shift) & (DK__RADIX - 1)]++;
        int64_t sum = 0;
        for (int b = 0; b < DK__RADIX; b++) {
            const int64_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (int64_t i = 0; i < n; i++) {
            const int64_t at = count[(ks[i] >> shift) & (DK__RADIX - 1)]++;
            kd[at] = ks[i];
            id[at] = is[i];
        }
        uint64_t *kt = ks;
        ks = kd, kd = kt;
        int64_t *it = is;
        is = id, id = it;
    }
    if (ks != key) {
        memcpy(key, ks, (size_t)n * sizeof *key);
        memcpy(idx, is, (size_t)n * sizeof *idx);
    }
}

static dk_status dk__argsort_keys(int64_t *idx, uint64_t *key, int64_t n, int bits, dk_arena *ar)
{
    uint64_t *k2 = (uint64_t *)dk_arena_take_n(ar, (size_t)n, sizeof *k2);
    int64_t *i2 = (int64_t *)dk_arena_take_n(ar, (size_t)n, sizeof *i2);
    if (!k2 || !i2) return dk_error(DK_ENOMEM, "argsort: out of memory for %lld keys", (long long)n);
    dk__radix_u64(key, idx, k2, i2, n, bits);
    return DK_OK;
}

/* keys -> their descending radix keys, then the sort; `bits` of key the mapping uses. */
#define DK__ARGSORT_DESC(LINK, T, SUFFIX, BITS)                                                                   \
    LINK dk_status dk_argsort_desc_##SUFFIX(int64_t *idx, const T *keys, int64_t stride, int64_t n, dk_arena *ar) \
    {                                                                                                             \
        uint64_t *key = (uint64_t *)dk_arena_take_n(ar, (size_t)n, sizeof *key);                                  \
        if (!key) return dk_error(DK_ENOMEM, "argsort: out of memory for %lld keys", (long long)n);               \
        for (int64_t i = 0; i < n; i++) {                                                                         \
            idx[i] = i;                                                                                           \
            key[i] = dk__desc_key_##SUFFIX(keys[i * stride]);                                                     \
        }                                                                                                         \
        return dk__argsort_keys(idx, key, n, BITS, ar);                                                           \
    }
DK__ARGSORT_DESC(, double, f64, 66) /* 6 passes of 11 bits */
static inline uint32_t dk__desc_key_f32_wide(float f) { return dk__desc_key_f32(f); }
DK__ARGSORT_DESC(static, float, f32_wide, 33) /* 2^32 keys or more (dk_argsort_desc_f32) */

/* Float scores, the common case, in 32-bit keys (the mapping fits: 0 for NaN, at least 1
 * otherwise) and three passes of 11 bits whose counts are all taken in the pass that makes the
 * keys; the first pass reads the indices 0 .. n - 1 without storing them, and the arrays are
 * chosen so that the last pass writes into idx: no copy. */
dk_status dk_argsort_desc_f32(int64_t *idx, const float *keys, int64_t stride, int64_t n, dk_arena *ar)
{
    if (n > (int64_t)UINT32_MAX) return dk_argsort_desc_f32_wide(idx, keys, stride, n, ar);
    uint32_t *ka = (uint32_t *)dk_arena_take_n(ar, (size_t)n, sizeof *ka);
    uint32_t *kb = (uint32_t *)dk_arena_take_n(ar, (size_t)n, sizeof *kb);
    int64_t *ib = (int64_t *)dk_arena_take_n(ar, (size_t)n, sizeof *ib);
    uint32_t *count = (uint32_t *)dk_arena_take_n(ar, 3 * DK__RADIX, sizeof *count);
    if (!ka || !kb || !ib || !count) return dk_error(DK_ENOMEM, "argsort: out of memory for %lld keys", (long long)n);
    memset(count, 0, 3 * DK__RADIX * sizeof *count);
    uint32_t *c0 = count, *c1 = count + DK__RADIX, *c2 = count + 2 * DK__RADIX;
    for (int64_t i = 0; i < n; i++) {
        const uint32_t k = dk__desc_key_f32(keys[i * stride]);
        ka[i] = k;
        c0[k & (DK__RADIX - 1)]++;
        c1[(k >> DK__RADIX_BITS) & (DK__RADIX - 1)]++;
        c2[k >> (2 * DK__RADIX_BITS)]++;
    }
    int pass[3], np = 0;
    for (int p = 0; p < 3 && n; p++) {
        uint32_t *c = count + p * DK__RADIX;
        if (c[(ka[0] >> (p * DK__RADIX_BITS)) & (DK__RADIX - 1)] == (uint32_t)n) continue; /* one digit */
        uint32_t sum = 0;
        for (int b = 0; b < DK__RADIX; b++) {
            const uint32_t t = c[b];
            c[b] = sum;
            sum += t;
        }
        pass[np++] = p;
    }
    /* pass q writes its indices to idx when np - 1 - q is even, else to ib */
    uint32_t *ks = ka, *kd = kb;
    const int64_t *is = NULL;
    for (int q = 0; q < np; q++) {
        const int shift = pass[q] * DK__RADIX_BITS;
        uint32_t *c = count + pass[q] * DK__RADIX;
        int64_t *id = (np - 1 - q) % 2 == 0 ? idx : ib;
        for (int64_t i = 0; i < n; i++) {
            const uint32_t at = c[(ks[i] >> shift) & (DK__RADIX - 1)]++;
            kd[at] = ks[i];
            id[at] = is ? is[i] : i;
        }
        uint32_t *kt = ks;
        ks = kd, kd = kt;
        is = id;
    }
    if (!np)
        for (int64_t i = 0; i < n; i++) idx[i] = i;
    return DK_OK;
}

dk_status dk_argsort_u64(int64_t *idx, uint64_t *key, int64_t n, dk_arena *ar)
{
    return dk__argsort_keys(idx, key, n, 66, ar);
}

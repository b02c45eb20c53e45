/* dk_argsort.c — stable argsort with a context (dk_argsort.h): bottom-up merge sort, with short
 * runs sorted by insertion first. */
#include "dk_argsort.h"

#define DK__RUN 16

static void dk__insertion(int64_t *a, int64_t n, dk_before_fn before, const void *ctx)
{
    for (int64_t i = 1; i < n; ++i) {
        const int64_t v = a[i];
        int64_t j = i;
        for (; j > 0 && before(v, a[j - 1], ctx); --j) a[j] = a[j - 1];
        a[j] = v;
    }
}

/* Merges a[0 .. m) and a[m .. n) into out; from the left run first on ties (stability). */
static void dk__merge(const int64_t *a, int64_t m, int64_t n, int64_t *out, dk_before_fn before, const void *ctx)
{
    int64_t i = 0, j = m, k = 0;
    while (i < m && j < n) out[k++] = before(a[j], a[i], ctx) ? a[j++] : a[i++];
    while (i < m) out[k++] = a[i++];
    while (j < n) out[k++] = a[j++];
}

dk_status dk_argsort(int64_t *idx, int64_t n, dk_before_fn before, const void *ctx, dk_arena *ar)
{
    for (int64_t i = 0; i < n; ++i) idx[i] = i;
    if (n < 2) return DK_OK;
    for (int64_t s = 0; s < n; s += DK__RUN) dk__insertion(idx + s, n - s < DK__RUN ? n - s : DK__RUN, before, ctx);
    if (n <= DK__RUN) return DK_OK;
    int64_t *tmp = (int64_t *)dk_arena_take_n(ar, (size_t)n, sizeof *tmp);
    if (!tmp) return dk_error(DK_ENOMEM, "dk_argsort: out of memory for %lld indices", (long long)n);
    int64_t *src = idx, *dst = tmp;
    for (int64_t w = DK__RUN; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            const int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            dk__merge(src + lo, mid - lo, hi - lo, dst + lo, before, ctx);
        }
        int64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != idx)
        for (int64_t i = 0; i < n; ++i) idx[i] = src[i];
    return DK_OK;
}

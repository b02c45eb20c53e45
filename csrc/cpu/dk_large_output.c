/* dk_large_output.c — large fresh outputs (dk_large_output.h). */
#include "dk_large_output.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "dk_tunables.h"

DK_TUNABLE(dk__lo_min, "large_output.min_bytes", (int64_t)8 << 20, 0, INT64_MAX,
           "outputs of at least this many bytes get huge pages, streaming stores and shadow faulting")
DK_TUNABLE(dk__lo_stage, "large_output.stage_bytes", (int64_t)8 << 20, 0, (int64_t)1 << 40,
           "per thread, results staged while thread 0 faults a fresh output in")

int64_t dk_large_output_min_bytes(void) { return dk_tunable(&dk__lo_min); }
int64_t dk_large_output_stage_bytes(void) { return dk_tunable(&dk__lo_stage); }

#define DK__HUGE ((uintptr_t)2 << 20) /* the PMD size of x86-64 and 4 KiB-page arm64 */

/* Whether the page-aligned range [p, p + bytes) looks faulted in already: 8 pages spread over
 * it are resident (one mincore call each; an error answers yes, so that nothing is done). */
static bool dk__resident(void *p, size_t bytes)
{
#if defined(__linux__)
    const size_t page = 4096;
    for (int i = 0; i < 8; ++i) {
        unsigned char v = 1;
        char *at = (char *)p + (bytes / page * (size_t)i / 8) * page;
        if (mincore(at, page, &v) == 0 && !(v & 1)) return false;
    }
#else
    (void)p, (void)bytes;
#endif
    return true;
}

bool dk_large_output_prepare(dk_large_output *lo, void *data, int ndim, const int64_t *n, const int64_t *s, size_t elem,
                             bool track_fill)
{
    lo->large = false;
    lo->fill = NULL;
    lo->fill_bytes = 0;
    atomic_init(&lo->filled, 0);
    uint64_t below = 0, above = 0; /* element offsets of the first and last element */
    for (int d = 0; d < ndim; ++d) {
        if (n[d] <= 0) return false;
        uint64_t e;
        const uint64_t a = s[d] < 0 ? 0 - (uint64_t)s[d] : (uint64_t)s[d];
        if (__builtin_mul_overflow((uint64_t)(n[d] - 1), a, &e)) return false;
        if (s[d] < 0 ? __builtin_add_overflow(below, e, &below) : __builtin_add_overflow(above, e, &above))
            return false;
    }
    uint64_t bytes;
    if (__builtin_add_overflow(below, above, &bytes) || __builtin_add_overflow(bytes, 1, &bytes) ||
        __builtin_mul_overflow(bytes, (uint64_t)elem, &bytes))
        return false; /* the op's checks refuse such outputs before any kernel runs */
    if (bytes < (uint64_t)dk_large_output_min_bytes()) return false;
    lo->large = true;
    char *first = (char *)data - below * elem;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t a = ((uintptr_t)first + DK__HUGE - 1) & ~(DK__HUGE - 1);
    const uintptr_t b = ((uintptr_t)first + bytes) & ~(DK__HUGE - 1);
    /* The hint fails on memory that is not anonymous (a file mapping, e.g. numpy.memmap); then
     * nothing is populated either: faulting in a file's pages could dirty them. */
    const bool anon = b > a && madvise((void *)a, b - a, MADV_HUGEPAGE) == 0;
    if (anon && track_fill && !dk__resident((void *)a, b - a)) {
        lo->fill = (char *)a;
        lo->fill_bytes = b - a;
    }
#else
    (void)first, (void)track_fill;
#endif
    return true;
}

void dk_large_output_populate(dk_large_output *lo)
{
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    if (lo->fill) (void)madvise(lo->fill, lo->fill_bytes, MADV_POPULATE_WRITE);
#endif
    atomic_store_explicit(&lo->filled, 1, memory_order_release);
}

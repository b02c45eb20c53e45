/*
 * test_channels_last.c — dk_cl_gather32 and dk_cl_scatter32 (csrc/cpu/dk_channels_last.h, Note
 * [Channels-last copies]) against the definition written out here, on both paths (the AVX2 tiles
 * where this CPU has AVX2, and the element loops), for every channel count from 1 to 19 (whole
 * groups of 8, and the 1-7 channels past them, which the scatter moves in masked tiles) and pixel
 * counts around whole tiles, with row and plane strides wider than their contents.
 *
 * Every element of a destination that the move must not write holds a sentinel that is checked, and
 * the masked tiles' sources end at an unreadable page: a load of a lane past the last channel of the
 * last row faults.
 */
#include <sys/mman.h>
#include <unistd.h>

#include "dk_channels_last.h"
#include "dk_test.h"

#define SENTINEL (-12345.0f)

static bool have_avx2(void)
{
#if DK_CL_AVX2
    return __builtin_cpu_supports("avx2");
#else
    return false;
#endif
}

/* A distinct value for element i of a source. */
static float value(int64_t i) { return (float)(i % 100003) + 0.25f; }

/* planes (nc planes of npix pixels, cs apart) -> rows (npix rows of nc channels, ld apart), and back,
 * on the path `avx2`, checked element by element against the definition. */
static void check_both(int64_t nc, int64_t npix, int64_t ld, int64_t cs, bool avx2)
{
    /* each destination one plane or row longer than the move's, that extra one checked untouched */
    const size_t np = (size_t)(nc * cs), nr = (size_t)(npix * ld);
    float *planes = malloc(np * sizeof(float)), *rows = malloc((nr + (size_t)ld) * sizeof(float));
    float *back = malloc((np + (size_t)cs) * sizeof(float));
    assert_non_null(planes);
    assert_non_null(rows);
    assert_non_null(back);
    for (size_t i = 0; i < np; i++) planes[i] = value((int64_t)i);
    for (size_t i = 0; i < np + (size_t)cs; i++) back[i] = SENTINEL;
    for (size_t i = 0; i < nr + (size_t)ld; i++) rows[i] = SENTINEL;
    dk_cl_gather32(planes, cs, nc, npix, rows, ld, avx2);
    for (int64_t p = 0; p <= npix; p++)
        for (int64_t c = 0; c < ld; c++) {
            const float want = c < nc && p < npix ? planes[c * cs + p] : SENTINEL;
            if (rows[p * ld + c] != want)
                fail_msg("gather nc %lld npix %lld ld %lld cs %lld avx2 %d: rows[%lld][%lld] = %g, want %g",
                         (long long)nc, (long long)npix, (long long)ld, (long long)cs, (int)avx2, (long long)p,
                         (long long)c, (double)rows[p * ld + c], (double)want);
        }
    dk_cl_scatter32(rows, ld, npix, nc, back, cs, avx2);
    for (int64_t c = 0; c <= nc; c++)
        for (int64_t p = 0; p < cs; p++) {
            const float want = c < nc && p < npix ? planes[c * cs + p] : SENTINEL;
            if (back[c * cs + p] != want)
                fail_msg("scatter nc %lld npix %lld ld %lld cs %lld avx2 %d: planes[%lld][%lld] = %g, want %g",
                         (long long)nc, (long long)npix, (long long)ld, (long long)cs, (int)avx2, (long long)c,
                         (long long)p, (double)back[c * cs + p], (double)want);
        }
    free(planes), free(rows), free(back);
}

static void moves_every_shape(void **state)
{
    (void)state;
    static const int64_t pixels[] = {1, 7, 8, 9, 15, 16, 17, 24, 31};
    for (int path = 0; path < 2; path++) {
        const bool avx2 = path == 1;
        if (avx2 && !have_avx2()) continue;
        for (int64_t nc = 1; nc <= 19; nc++)
            for (size_t i = 0; i < sizeof pixels / sizeof *pixels; i++)
                for (int64_t extra = 0; extra <= 3; extra += 3) {
                    check_both(nc, pixels[i], nc + extra, pixels[i] + 2 * extra, avx2);
                }
    }
}

/* The scatter's last channels (nc not a multiple of 8) from rows that end at an unreadable page,
 * the rows packed (ld = nc): the last row's lanes past nc lie on that page, and only the masks keep
 * the tiles' loads off it. */
static void scatter_tail_reads_no_further(void **state)
{
    (void)state;
    if (!have_avx2()) skip();
    const long page = sysconf(_SC_PAGESIZE);
    char *map = mmap(NULL, (size_t)(2 * page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + page, (size_t)page, PROT_NONE), 0);
    for (int64_t nc = 1; nc <= 19; nc++) {
        if (nc % 8 == 0) continue;
        const int64_t npix = 16, ld = nc;
        float *rows = (float *)(void *)(map + page) - npix * ld; /* its last element ends the page */
        for (int64_t i = 0; i < npix * ld; i++) rows[i] = value(i);
        float *planes = malloc((size_t)(nc * npix) * sizeof(float));
        assert_non_null(planes);
        dk_cl_scatter32(rows, ld, npix, nc, planes, npix, true);
        for (int64_t c = 0; c < nc; c++)
            for (int64_t p = 0; p < npix; p++) assert_true(planes[c * npix + p] == rows[p * ld + c]);
        free(planes);
    }
    munmap(map, (size_t)(2 * page));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(moves_every_shape),
        cmocka_unit_test(scatter_tail_reads_no_further),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

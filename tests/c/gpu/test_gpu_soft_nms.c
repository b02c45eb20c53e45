/*
 * test_gpu_soft_nms.c — soft_nms's GPU kernel against its CPU kernel (MMCV's procedure, step for
 * step: test_kernel_nms.c), bit for bit: the same boxes selected in the same order with the same
 * decayed scores, and the same count, for every dtype (16-bit computed in float32), every method,
 * both offsets, thresholds and min_scores that remove much, little or nothing (NaN), tied, NaN and
 * negative scores, NaN and infinite boxes, empty input, and runs of positions per thread short
 * and long (Note [Soft-NMS on a GPU]). Built twice (gpu/dk_gpu_test.h): emulated on the host in
 * `make test-c`, on a real GPU in `make test-gpu`.
 */
#include <math.h>

#include "dk_tunables.h"
#include "gpu/dk_gpu_test.h"
#include "nms.h"

#ifdef DKT_GPU_EMULATED
#include "soft_nms_gpu.h"
#define GPU_SOFT_NMS dk_soft_nms_gpu
#else
#define GPU_SOFT_NMS dk_soft_nms
#endif

/* Element bits of row k of a [N, *] tensor (or element k of a [N] one). */
static const void *elem(const dkk_tensor *t, int64_t k, int64_t d)
{
    const int64_t idx[2] = {k, d};
    return (const char *)t->mem + dkk_offset(t, idx) * (int64_t)dk_dtype_size(dk_tensor_dtype(&t->t));
}

static void check(dk_dtype dt, int64_t n, int method, double thr, double min_score, int64_t offset, dkk_rng *r)
{
    char what[200];
    snprintf(what, sizeof what, "soft_nms %s, n %lld, method %d, threshold %g, min_score %g, offset %lld",
             dk_dtype_name(dt), (long long)n, method, thr, min_score, (long long)offset);
    const double sigma = 0.5;
    dkk_tensor *b = dkk_new(dt, 2, (int64_t[]){n, 4}, NULL, 1), *s = dkk_new(dt, 1, (int64_t[]){n}, NULL, 2);
    dkg_clustered_boxes(b, s, r, n, true);
    dkk_tensor *dets = dkk_new(dt, 2, (int64_t[]){n, 5}, NULL, 0), *inds = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 0);
    dkk_tensor *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    dkk_tensor *gdets = dkk_new(dt, 2, (int64_t[]){n, 5}, (int[]){1, 0}, 1);
    dkk_tensor *ginds = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 1), *gnum = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    ((int64_t *)gnum->mem)[0] = -7; /* must be written */
    assert_ok(dk_soft_nms(&b->t, &s->t, &dets->t, &inds->t, &num->t, thr, sigma, min_score, method, offset));
    dkg_tensor db, ds, dd, di, dn;
    dkg_up(&db, b), dkg_up(&ds, s), dkg_up(&dd, gdets), dkg_up(&di, ginds), dkg_up(&dn, gnum);
    assert_ok(GPU_SOFT_NMS(&db.dev, &ds.dev, &dd.dev, &di.dev, &dn.dev, thr, sigma, min_score, method, offset));
    dkg_down(&dd), dkg_down(&di), dkg_down(&dn);
    dkg_assert_same_keep(inds, num, ginds, gnum, what); /* the same boxes in the same order */
    const int64_t m = ((int64_t *)num->mem)[0];
    const size_t es = dk_dtype_size(dt);
    for (int64_t k = 0; k < m; k++)
        for (int64_t d = 0; d < 5; d++) {
            if (!memcmp(elem(gdets, k, d), elem(dets, k, d), es)) continue;
            const double g = dkk_get(gdets, (int64_t[]){k, d}), c = dkk_get(dets, (int64_t[]){k, d});
#ifndef DKT_GPU_EMULATED
            /* a NaN box's coordinates: NaN on both sides, with the hardware's sign and payload */
            if (isnan(g) && isnan(c)) continue;
            /* a real GPU's exp for the gaussian decay (gpu/dk_gpu_test.h) */
            if (method == DK_SOFT_NMS_GAUSSIAN && d == 4 && fabs(g - c) <= 1e-5 * (1 + fabs(c))) continue;
#endif
            fail_msg("%s: dets[%lld, %lld] is %.9g on the GPU, %.9g on the CPU", what, (long long)k, (long long)d, g, c);
        }
    dkg_release(&db), dkg_release(&ds), dkg_release(&dd), dkg_release(&di), dkg_release(&dn);
    dkk_free(b), dkk_free(s), dkk_free(dets), dkk_free(inds), dkk_free(num), dkk_free(gdets), dkk_free(ginds),
        dkk_free(gnum);
}

/* Every dtype, method, threshold and min_score at n = 200 (offset 1 too), and every size for the
 * defaults; `quick` runs float32 and bfloat16 only. */
static void run_all(bool quick)
{
    static const dk_dtype dts[] = {DK_FLOAT32, DK_BFLOAT16, DK_FLOAT64, DK_FLOAT16};
    static const int64_t sizes[] = {0, 1, 2, 63, 200};
    static const double thrs[] = {0.3, 0.7};
    static const double mins[] = {0.001, 0.2, 0.0, NAN};
    dkk_rng r = {0x50f7};
    for (size_t d = 0; d < (quick ? 2 : DK_COUNTOF(dts)); d++)
        for (size_t z = 0; z < DK_COUNTOF(sizes); z++)
            for (int method = 0; method < 3; method++)
                for (size_t t = 0; t < DK_COUNTOF(thrs); t++)
                    for (size_t k = 0; k < DK_COUNTOF(mins); k++)
                        for (int64_t off = 0; off < 2; off++) {
                            if ((off || t || k > 1) && (z != 4 || quick)) continue; /* keep it quick */
                            check(dts[d], sizes[z], method, thrs[t], mins[k], off, &r);
                        }
}

static void set_threads(int64_t t) { assert_ok(dk_tunable_set("soft_nms.gpu_threads", t, NULL)); }

/* 64 threads: runs of 1 to 4 positions at n = 200 (and the emulation stays quick). */
static void gpu_matches_cpu(void **state)
{
    (void)state;
    set_threads(64);
    run_all(false);
    set_threads(512);
}

/* The default 512 threads (most runs empty), and few: long runs of positions per thread; 1: the
 * whole procedure in one thread; 100 is rounded down to 64. */
static void gpu_matches_cpu_with_other_thread_counts(void **state)
{
    (void)state;
    run_all(true);
    set_threads(8);
    run_all(true);
    dkk_rng r = {0x50f8};
    set_threads(1);
    check(DK_FLOAT32, 150, DK_SOFT_NMS_LINEAR, 0.3, 0.05, 0, &r);
    set_threads(100);
    check(DK_FLOAT32, 150, DK_SOFT_NMS_GAUSSIAN, 0.3, 0.05, 0, &r);
    set_threads(512);
}

/* More boxes than threads, and many removals per step. */
static void many_boxes(void **state)
{
    (void)state;
    dkk_rng r = {0x50f9};
    set_threads(128);
    check(DK_FLOAT32, 1500, DK_SOFT_NMS_GAUSSIAN, 0.3, 0.05, 0, &r);
    check(DK_FLOAT16, 1000, DK_SOFT_NMS_LINEAR, 0.2, 0.1, 1, &r);
    check(DK_FLOAT64, 1000, DK_SOFT_NMS_NAIVE, 0.5, 0.001, 0, &r);
    set_threads(512);
}

int main(void)
{
    if (dkg_setup()) return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpu_matches_cpu),
        cmocka_unit_test(gpu_matches_cpu_with_other_thread_counts),
        cmocka_unit_test(many_boxes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

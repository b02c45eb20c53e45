/*
 * test_gpu_nms.c — the nms family's GPU kernels against their CPU kernels (test_kernel_nms.c).
 * Built twice (gpu/dk_gpu_test.h): emulated on the host in `make test-c`, on a real GPU in
 * `make test-gpu`.
 *
 * nms (whose CPU decisions are the references'): the kept indices, their order and their count
 * must be equal, for every dtype, both offsets, thresholds that suppress much, little, everything
 * or nothing (NaN), categories of either integer type or none, tied and NaN scores, sizes around
 * the 64-box block, and masks made in one chunk or many (Note [Bounded NMS memory]).
 *
 * nms_match (MMCV's groups): members, starts and the number of groups equal to the CPU's, for
 * every dtype, thresholds that group much, little, everything (0) or nothing (NaN), tied and
 * NaN scores, NaN and infinite boxes, sizes around the 64-box block, one chunk or many.
 *
 * soft_nms (MMCV's procedure, step for step), bit for bit: the same boxes selected in the same
 * order with the same decayed scores, and the same count, for every dtype (16-bit computed in
 * float32), every method, both offsets, thresholds and min_scores that remove much, little or
 * nothing (NaN), tied, NaN and negative scores, NaN and infinite boxes, empty input, and runs of
 * positions per thread short and long (Note [Soft-NMS on a GPU]).
 */
#include <math.h>

#include "dk_tunables.h"
#include "gpu/dk_gpu_test.h"
#include "nms.h"

#ifdef DKT_GPU_EMULATED
#include "nms/nms_gpu.h"
#include "nms/nms_match_gpu.h"
#include "nms/soft_nms_gpu.h"
#define GPU_NMS dk_nms_gpu
#define GPU_NMS_MATCH dk_nms_match_gpu
#define GPU_SOFT_NMS dk_soft_nms_gpu
#else
#define GPU_NMS dk_nms
#define GPU_NMS_MATCH dk_nms_match
#define GPU_SOFT_NMS dk_soft_nms
#endif

static void check(dk_dtype dt, int64_t n, double thr, int64_t offset, int cats, dkk_rng *r)
{
    char what[200];
    snprintf(what, sizeof what, "%s, n %lld, threshold %g, offset %lld, categories %d", dk_dtype_name(dt), (long long)n,
             thr, (long long)offset, cats);
    dkk_tensor *b = dkk_new(dt, 2, (int64_t[]){n, 4}, NULL, 0), *s = dkk_new(dt, 1, (int64_t[]){n}, NULL, 0);
    dkg_clustered_boxes(b, s, r, n, false);
    dkk_tensor *idx = NULL;
    if (cats) {
        idx = dkk_new(cats == 1 ? DK_INT32 : DK_INT64, 1, (int64_t[]){n}, NULL, 0);
        for (int64_t i = 0; i < n; i++) dkk_set(idx, (int64_t[]){i}, (double)(dkk_u64(r) % 3));
    }
    dkk_tensor *keep = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 0),
               *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    dkk_tensor *gkeep = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 0),
               *gnum = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    assert_ok(dk_nms(&b->t, &s->t, idx ? &idx->t : NULL, &keep->t, &num->t, thr, offset));
    dkg_tensor db, ds, di, dk, dn;
    dkg_up(&db, b), dkg_up(&ds, s), dkg_up(&dk, gkeep), dkg_up(&dn, gnum);
    if (idx) dkg_up(&di, idx);
    assert_ok(GPU_NMS(&db.dev, &ds.dev, idx ? &di.dev : NULL, &dk.dev, &dn.dev, thr, offset));
    dkg_down(&dk), dkg_down(&dn);
    dkg_assert_same_keep(keep, num, gkeep, gnum, what);
    dkg_release(&db), dkg_release(&ds), dkg_release(&dk), dkg_release(&dn);
    if (idx) dkg_release(&di);
    dkk_free(b), dkk_free(s), dkk_free(idx), dkk_free(keep), dkk_free(num), dkk_free(gkeep), dkk_free(gnum);
}

static void run_all(void)
{
    static const dk_dtype dts[] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16};
    static const int64_t sizes[] = {0, 1, 63, 64, 65, 200};
    static const double thrs[] = {0.5, 0.1, 0.0, -0.5, NAN};
    dkk_rng r = {0x9e3};
    for (size_t d = 0; d < DK_COUNTOF(dts); d++)
        for (size_t z = 0; z < DK_COUNTOF(sizes); z++)
            for (size_t t = 0; t < DK_COUNTOF(thrs); t++)
                for (int64_t off = 0; off < 2; off++)
                    for (int cats = 0; cats < 3; cats++) {
                        if ((cats || off) && (t > 1 || (z != 5 && z != 2))) continue; /* keep it quick */
                        check(dts[d], sizes[z], thrs[t], off, cats, &r);
                    }
}

static void gpu_matches_cpu_in_one_chunk(void **state)
{
    (void)state;
    run_all();
}

static void gpu_matches_cpu_one_block_per_chunk(void **state)
{
    (void)state;
    assert_ok(dk_tunable_set("nms.gpu_chunk_bytes", 8, NULL)); /* every 64 rows a chunk */
    run_all();
    assert_ok(dk_tunable_set("nms.gpu_chunk_bytes", (int64_t)64 << 20, NULL));
}

/* A larger case: 3,000 boxes, 47 mask words per row, several chunks of several blocks. */
static void many_boxes_in_several_chunks(void **state)
{
    (void)state;
    dkk_rng r = {5};
    assert_ok(dk_tunable_set("nms.gpu_chunk_bytes", 64 * 47 * 8 * 5, NULL));
    check(DK_FLOAT32, 3000, 0.5, 0, 0, &r);
    check(DK_FLOAT32, 3000, 0.7, 0, 2, &r);
    assert_ok(dk_tunable_set("nms.gpu_chunk_bytes", (int64_t)64 << 20, NULL));
}

/* ---- nms_match ----------------------------------------------------------------------- */

static void match_check(dk_dtype dt, int64_t n, double thr, bool hostile, dkk_rng *r)
{
    char what[200];
    snprintf(what, sizeof what, "nms_match %s, n %lld, threshold %g, hostile %d", dk_dtype_name(dt), (long long)n, thr,
             hostile);
    dkk_tensor *b = dkk_new(dt, 2, (int64_t[]){n, 4}, NULL, 0), *s = dkk_new(dt, 1, (int64_t[]){n}, NULL, 0);
    dkg_clustered_boxes(b, s, r, n, hostile);
    dkk_tensor *out[6];
    for (int k = 0; k < 6; k++) out[k] = dkk_new(DK_INT64, 1, (int64_t[]){k % 3 == 2 ? 1 : n}, NULL, 0);
    assert_ok(dk_nms_match(&b->t, &s->t, &out[0]->t, &out[1]->t, &out[2]->t, thr));
    dkg_tensor db, ds, dm, dst, dn;
    dkg_up(&db, b), dkg_up(&ds, s), dkg_up(&dm, out[3]), dkg_up(&dst, out[4]), dkg_up(&dn, out[5]);
    assert_ok(GPU_NMS_MATCH(&db.dev, &ds.dev, &dm.dev, &dst.dev, &dn.dev, thr));
    dkg_down(&dm), dkg_down(&dst), dkg_down(&dn);
    const int64_t groups = ((int64_t *)out[2]->mem)[0], ggroups = ((int64_t *)out[5]->mem)[0];
    if (groups != ggroups)
        fail_msg("%s: %lld groups on the GPU, %lld on the CPU", what, (long long)ggroups, (long long)groups);
    for (int64_t i = 0; i < n; i++)
        if (((int64_t *)out[0]->mem)[i] != ((int64_t *)out[3]->mem)[i])
            fail_msg("%s: members[%lld] is %lld on the GPU, %lld on the CPU", what, (long long)i,
                     (long long)((int64_t *)out[3]->mem)[i], (long long)((int64_t *)out[0]->mem)[i]);
    for (int64_t g = 0; g < groups; g++)
        if (((int64_t *)out[1]->mem)[g] != ((int64_t *)out[4]->mem)[g])
            fail_msg("%s: starts[%lld] is %lld on the GPU, %lld on the CPU", what, (long long)g,
                     (long long)((int64_t *)out[4]->mem)[g], (long long)((int64_t *)out[1]->mem)[g]);
    dkg_release(&db), dkg_release(&ds), dkg_release(&dm), dkg_release(&dst), dkg_release(&dn);
    dkk_free(b), dkk_free(s);
    for (int k = 0; k < 6; k++) dkk_free(out[k]);
}

static void match_run_all(void)
{
    static const dk_dtype dts[] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16};
    static const int64_t sizes[] = {0, 1, 63, 64, 65, 200};
    static const double thrs[] = {0.5, 0.1, 0.0, NAN};
    dkk_rng r = {0x51};
    for (size_t d = 0; d < DK_COUNTOF(dts); d++)
        for (size_t z = 0; z < DK_COUNTOF(sizes); z++)
            for (size_t t = 0; t < DK_COUNTOF(thrs); t++) match_check(dts[d], sizes[z], thrs[t], z % 2 == 1, &r);
}

static void nms_match_gpu_matches_cpu(void **state)
{
    (void)state;
    match_run_all();
    assert_ok(dk_tunable_set("nms.gpu_chunk_bytes", 8, NULL)); /* every 64 rows a chunk */
    match_run_all();
    dkk_rng r = {6};
    assert_ok(dk_tunable_set("nms.gpu_chunk_bytes", 64 * 32 * 8 * 3, NULL)); /* 2,000 boxes: 32 words a row */
    match_check(DK_FLOAT32, 2000, 0.6, false, &r);
    match_check(DK_FLOAT64, 2000, 0.3, true, &r);
    assert_ok(dk_tunable_set("nms.gpu_chunk_bytes", (int64_t)64 << 20, NULL));
}

/* ---- soft_nms ------------------------------------------------------------------------ */

/* Element bits of row k of a [N, *] tensor (or element k of a [N] one). */
static const void *elem(const dkk_tensor *t, int64_t k, int64_t d)
{
    const int64_t idx[2] = {k, d};
    return (const char *)t->mem + dkk_offset(t, idx) * (int64_t)dk_dtype_size(dk_tensor_dtype(&t->t));
}

static void soft_check(dk_dtype dt, int64_t n, int method, double thr, double min_score, int64_t offset, dkk_rng *r)
{
    char what[200];
    snprintf(what, sizeof what, "soft_nms %s, n %lld, method %d, threshold %g, min_score %g, offset %lld",
             dk_dtype_name(dt), (long long)n, method, thr, min_score, (long long)offset);
    const double sigma = 0.5;
    dkk_tensor *b = dkk_new(dt, 2, (int64_t[]){n, 4}, NULL, 1), *s = dkk_new(dt, 1, (int64_t[]){n}, NULL, 2);
    dkg_clustered_boxes(b, s, r, n, true);
    dkk_tensor *dets = dkk_new(dt, 2, (int64_t[]){n, 5}, NULL, 0),
               *inds = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 0);
    dkk_tensor *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    dkk_tensor *gdets = dkk_new(dt, 2, (int64_t[]){n, 5}, (int[]){1, 0}, 1);
    dkk_tensor *ginds = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 1),
               *gnum = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
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
            fail_msg("%s: dets[%lld, %lld] is %.9g on the GPU, %.9g on the CPU", what, (long long)k, (long long)d, g,
                     c);
        }
    dkg_release(&db), dkg_release(&ds), dkg_release(&dd), dkg_release(&di), dkg_release(&dn);
    dkk_free(b), dkk_free(s), dkk_free(dets), dkk_free(inds), dkk_free(num), dkk_free(gdets), dkk_free(ginds),
        dkk_free(gnum);
}

/* Every dtype, method, threshold and min_score at n = 200 (offset 1 too), and every size for the
 * defaults; `quick` runs float32 and bfloat16 only. */
static void soft_run_all(bool quick)
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
                            soft_check(dts[d], sizes[z], method, thrs[t], mins[k], off, &r);
                        }
}

static void soft_set_threads(int64_t t) { assert_ok(dk_tunable_set("soft_nms.gpu_threads", t, NULL)); }

/* 64 threads: runs of 1 to 4 positions at n = 200 (and the emulation stays quick). */
static void soft_nms_gpu_matches_cpu(void **state)
{
    (void)state;
    soft_set_threads(64);
    soft_run_all(false);
    soft_set_threads(512);
}

/* The default 512 threads (most runs empty), and few: long runs of positions per thread; 1: the
 * whole procedure in one thread; 100 is rounded down to 64. */
static void soft_nms_gpu_matches_cpu_with_other_thread_counts(void **state)
{
    (void)state;
    soft_run_all(true);
    soft_set_threads(8);
    soft_run_all(true);
    dkk_rng r = {0x50f8};
    soft_set_threads(1);
    soft_check(DK_FLOAT32, 150, DK_SOFT_NMS_LINEAR, 0.3, 0.05, 0, &r);
    soft_set_threads(100);
    soft_check(DK_FLOAT32, 150, DK_SOFT_NMS_GAUSSIAN, 0.3, 0.05, 0, &r);
    soft_set_threads(512);
}

/* More boxes than threads, and many removals per step. */
static void soft_nms_many_boxes(void **state)
{
    (void)state;
    dkk_rng r = {0x50f9};
    soft_set_threads(128);
    soft_check(DK_FLOAT32, 1500, DK_SOFT_NMS_GAUSSIAN, 0.3, 0.05, 0, &r);
    soft_check(DK_FLOAT16, 1000, DK_SOFT_NMS_LINEAR, 0.2, 0.1, 1, &r);
    soft_check(DK_FLOAT64, 1000, DK_SOFT_NMS_NAIVE, 0.5, 0.001, 0, &r);
    soft_set_threads(512);
}

int main(void)
{
    if (dkg_setup()) return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpu_matches_cpu_in_one_chunk),
        cmocka_unit_test(gpu_matches_cpu_one_block_per_chunk),
        cmocka_unit_test(many_boxes_in_several_chunks),
        cmocka_unit_test(nms_match_gpu_matches_cpu),
        cmocka_unit_test(soft_nms_gpu_matches_cpu),
        cmocka_unit_test(soft_nms_gpu_matches_cpu_with_other_thread_counts),
        cmocka_unit_test(soft_nms_many_boxes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_gpu_nms.c — NMS's GPU kernel against its CPU kernel (whose decisions are the references',
 * test_kernel_nms.c): the kept indices, their order and their count must be equal, for every
 * dtype, both offsets, thresholds that suppress much, little, everything or nothing (NaN),
 * categories of either integer type or none, tied and NaN scores, sizes around the 64-box
 * block, and masks made in one chunk or many (Note [Bounded NMS memory]). Built twice
 * (gpu/dk_gpu_test.h): emulated on the host in `make test-c`, on a real GPU in `make test-gpu`.
 */
#include <math.h>

#include "dk_tunables.h"
#include "gpu/dk_gpu_test.h"
#include "nms.h"

#ifdef DKT_GPU_EMULATED
#include "nms_gpu.h"
#define GPU_NMS dk_nms_gpu
#else
#define GPU_NMS dk_nms
#endif

static void check(dk_dtype dt, int64_t n, double thr, int64_t offset, int cats, dkk_rng *r)
{
    char what[200];
    snprintf(what, sizeof what, "%s, n %lld, threshold %g, offset %lld, categories %d", dk_dtype_name(dt),
             (long long)n, thr, (long long)offset, cats);
    dkk_tensor *b = dkk_new(dt, 2, (int64_t[]){n, 4}, NULL, 0), *s = dkk_new(dt, 1, (int64_t[]){n}, NULL, 0);
    dkg_clustered_boxes(b, s, r, n, false);
    dkk_tensor *idx = NULL;
    if (cats) {
        idx = dkk_new(cats == 1 ? DK_INT32 : DK_INT64, 1, (int64_t[]){n}, NULL, 0);
        for (int64_t i = 0; i < n; i++) dkk_set(idx, (int64_t[]){i}, (double)(dkk_u64(r) % 3));
    }
    dkk_tensor *keep = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 0), *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    dkk_tensor *gkeep = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 0), *gnum = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
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

int main(void)
{
    if (dkg_setup()) return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpu_matches_cpu_in_one_chunk),
        cmocka_unit_test(gpu_matches_cpu_one_block_per_chunk),
        cmocka_unit_test(many_boxes_in_several_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

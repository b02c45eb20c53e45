/*
 * test_gemm.c — dk_sgemm (csrc/cpu/dk_gemm.h, Note [dk_sgemm's contract]) against a product
 * computed here in double precision, with every micro-kernel this CPU has (the tunable
 * "gemm.isa", Note [Choosing the micro-kernel] in dk_sgemm.c).
 *
 * Every matrix is laid out with a row stride larger than its width, and the gaps hold NaN: a read
 * outside op(A) or op(B) poisons the product, and a write outside C changes a NaN that is checked.
 * Buffers end at the last row's last element, so AddressSanitizer's build sees a read past it.
 */
#include <float.h>
#include <math.h>

#include "dk_gemm.h"
#include "dk_test.h"
#include "dk_tunables.h"
#include "dk_sgemm_private.h"

static _Thread_local uint64_t rng_state = 0x2545f4914f6cdd1du;
static float rnd_unit(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* A rows x cols matrix with row stride ld >= cols: random values, NaN in the gaps. */
typedef struct {
    float *p;
    int64_t rows, cols, ld;
} mat;

static mat mat_new(int64_t rows, int64_t cols, int64_t ld)
{
    mat x = {NULL, rows, cols, ld};
    const size_t n = rows ? (size_t)((rows - 1) * ld + cols) : 0;
    x.p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(x.p);
    for (size_t i = 0; i < n; i++) x.p[i] = (int64_t)(i % (size_t)ld) < cols ? rnd_unit() : NAN;
    return x;
}

static size_t mat_len(const mat *x) { return x->rows ? (size_t)((x->rows - 1) * x->ld + x->cols) : 0; }

/* The sizes of the shape sweep: around each tile's sides (MR 4, 6, 8; NR 8, 16, 48) and their
 * multiples, up to 67. */
static const int64_t sizes_mn[] = {1, 3, 7, 8, 9, 16, 17, 31, 32, 33, 47, 48, 49, 64, 67};
static const int64_t sizes_k[] = {1, 2, 5, 16, 17, 67};
static const float alphas[] = {1.0f, 1.0f, -0.5f, 2.0f, 0.75f};
static const float betas[] = {0.0f, 1.0f, 2.0f, 0.0f, -1.0f};

/* The micro-kernel dk_sgemm must use when "gemm.isa" is `isa`: the one asked for, or the widest
 * this CPU has if it has not that one. */
static int expected_isa(int isa)
{
    int widest = DK__SGEMM_PORTABLE;
#if DK__SGEMM_X86
    if (__builtin_cpu_supports("avx512f")) widest = DK__SGEMM_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) widest = DK__SGEMM_AVX2;
#endif
    return isa < 0 || isa > widest ? widest : isa;
}

/*
 * Runs one product and checks every element of C against alpha * op(A)·op(B) + beta * C0 in
 * double. Bound: a float32 sum of k products, in any order, is within about k * 2^-24 of the
 * sum of their magnitudes, and alpha, beta and the final add round once more each; (k + 4) *
 * FLT_EPSILON is twice that. A lost or doubled term is of the order of one product, |S| / k on
 * average, far outside it for the k here.
 */
static void check_one(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, float beta, int64_t pad,
                      bool nan_c)
{
    /* op(A) is m x k: stored k x m when transposed */
    mat a = ta ? mat_new(k, m, m + pad) : mat_new(m, k, k + pad + 1);
    mat b = tb ? mat_new(n, k, k + 2 * pad) : mat_new(k, n, n + pad);
    mat c = mat_new(m, n, n + pad + 3);
    const size_t clen = mat_len(&c);
    if (nan_c)
        for (size_t i = 0; i < clen; i++) c.p[i] = NAN;
    float *c0 = malloc((clen ? clen : 1) * sizeof(float));
    assert_non_null(c0);
    memcpy(c0, c.p, clen * sizeof(float));

    dk_sgemm(ta, tb, m, n, k, alpha, a.p, a.ld, b.p, b.ld, beta, c.p, c.ld);

    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < c.ld && i * c.ld + j < (int64_t)clen; j++) {
            const float got = c.p[i * c.ld + j];
            if (j >= n) { /* the gap: untouched NaN */
                assert_true(isnan(got));
                continue;
            }
            double sum = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                const double x = ta ? a.p[p * a.ld + i] : a.p[i * a.ld + p];
                const double y = tb ? b.p[j * b.ld + p] : b.p[p * b.ld + j];
                sum += x * y;
                mag += fabs(x * y);
            }
            const double cij = beta == 0.0f ? 0.0 : (double)c0[i * c.ld + j];
            const double want = (double)alpha * sum + (double)beta * cij;
            const double tol = (double)(k + 4) * FLT_EPSILON * (fabs((double)alpha) * mag + fabs((double)beta * cij)) +
                               FLT_MIN;
            if (!(fabs(got - want) <= tol))
                fail_msg(
                    "ta=%d tb=%d m=%lld n=%lld k=%lld alpha=%g beta=%g: C[%lld][%lld] = %.9g, want %.9g (tol %.3g)", ta,
                    tb, (long long)m, (long long)n, (long long)k, alpha, beta, (long long)i, (long long)j, got, want,
                    tol);
        }
    }
    free(c0);
    free(a.p);
    free(b.p);
    free(c.p);
}

/* Every transpose combination, on the sweep of sizes, with each micro-kernel this CPU has and
 * the thread's packing buffer; with the widest, the stack's buffer too (Note [Packing buffers]
 * in dk_sgemm.c: the same driver, smaller blocks). */
static void every_shape_with_every_micro_kernel(void **state)
{
    (void)state;
    for (int isa = DK__SGEMM_PORTABLE; isa <= DK__SGEMM_AVX512; isa++) {
        assert_int_equal(dk_tunable_set("gemm.isa", isa, NULL), DK_OK);
        assert_int_equal(dk__sgemm_isa(), expected_isa(isa));
        if (dk__sgemm_isa() != isa) continue; /* the CPU has not this one: tested above as its fallback */
        for (int heap = 1; heap >= (isa == expected_isa(-1) ? 0 : 1); heap--) {
            assert_int_equal(dk_tunable_set("gemm.buffer", heap, NULL), DK_OK);
            int v = 0;
            for (int t = 0; t < 4; t++)
                for (size_t im = 0; im < DK_COUNTOF(sizes_mn); im++)
                    for (size_t in = 0; in < DK_COUNTOF(sizes_mn); in++)
                        for (size_t ik = 0; ik < DK_COUNTOF(sizes_k); ik++, v++)
                            check_one(t & 1, t & 2, sizes_mn[im], sizes_mn[in], sizes_k[ik], alphas[v % 5],
                                      betas[v % 5], (int64_t)(v % 3) * 5, false);
        }
    }
    dk_tunables_reset();
    assert_int_equal(dk__sgemm_isa(), expected_isa(-1));
}

/* Products larger than one block: several slabs of k (beta applied by the first only), several
 * A blocks of rows, many micro-panels; deform_conv2d's three products among them. */
static void products_larger_than_one_block(void **state)
{
    (void)state;
    static const int64_t shapes[][3] = {
        {64, 100, 576}, /* forward: W[Cout, K] cols[K, L] */
        {576, 100, 64}, /* gcols = W^T gout (trans_a) */
        {64, 100, 700}, /* gW = gout cols^T (trans_b) */
        {300, 20, 600}, {700, 9, 300}, {29, 45, 1100}, {580, 40, 70},
    };
    for (int isa = DK__SGEMM_PORTABLE; isa <= DK__SGEMM_AVX512; isa++) {
        assert_int_equal(dk_tunable_set("gemm.isa", isa, NULL), DK_OK);
        if (dk__sgemm_isa() != isa) continue;
        /* with the widest micro-kernel, the stack's buffer too: many more, smaller blocks */
        for (int heap = 1; heap >= (isa == expected_isa(-1) ? 0 : 1); heap--) {
            assert_int_equal(dk_tunable_set("gemm.buffer", heap, NULL), DK_OK);
            for (size_t s = 0; s < DK_COUNTOF(shapes); s++)
                for (int t = 0; t < 4; t++)
                    check_one(t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2], s % 2 ? 1.0f : -1.5f,
                              t % 2 ? 0.0f : 0.5f, 1 + (int64_t)t, false);
        }
    }
    dk_tunables_reset();
}

/* beta == 0 does not read C: NaN there does not reach the result, on full and edge tiles. */
static void beta_zero_ignores_nan_in_c(void **state)
{
    (void)state;
    for (int isa = DK__SGEMM_PORTABLE; isa <= DK__SGEMM_AVX512; isa++) {
        assert_int_equal(dk_tunable_set("gemm.isa", isa, NULL), DK_OK);
        if (dk__sgemm_isa() != isa) continue;
        for (int t = 0; t < 4; t++) {
            check_one(t & 1, t & 2, 67, 45, 33, 1.0f, 0.0f, 2, true);
            check_one(t & 1, t & 2, 28, 64, 300, 0.5f, 0.0f, 0, true); /* whole tiles, two slabs */
        }
    }
    dk_tunables_reset();
}

/* k == 0 and alpha == 0 scale C by beta and read neither A nor B (BLAS's rule); m or n == 0
 * writes nothing. */
static void empty_products_scale_c(void **state)
{
    (void)state;
    float nan_ab[4] = {NAN, NAN, NAN, NAN};
    float c[2 * 5];
    for (int alpha_zero = 0; alpha_zero < 2; alpha_zero++) {
        const int64_t k = alpha_zero ? 2 : 0;
        const float alpha = alpha_zero ? 0.0f : 1.0f;
        for (int i = 0; i < 10; i++) c[i] = (float)i;
        dk_sgemm(false, false, 2, 3, k, alpha, nan_ab, 2, nan_ab, 3, 2.0f, c, 5);
        for (int i = 0; i < 10; i++) assert_true(c[i] == (i % 5 < 3 ? 2.0f * (float)i : (float)i));
        for (int i = 0; i < 10; i++) c[i] = NAN;
        dk_sgemm(true, true, 2, 3, k, alpha, nan_ab, 2, nan_ab, 2, 0.0f, c, 5);
        for (int i = 0; i < 10; i++) assert_true(i % 5 < 3 ? c[i] == 0.0f : isnan(c[i]));
        for (int i = 0; i < 10; i++) c[i] = (float)i;
        dk_sgemm(false, false, 2, 3, k, alpha, nan_ab, 2, nan_ab, 3, 1.0f, c, 5);
        for (int i = 0; i < 10; i++) assert_true(c[i] == (float)i);
    }
    for (int i = 0; i < 10; i++) c[i] = NAN;
    dk_sgemm(false, false, 0, 3, 2, 1.0f, NULL, 2, nan_ab, 3, 0.0f, c, 5);
    dk_sgemm(false, false, 2, 0, 2, 1.0f, nan_ab, 2, NULL, 1, 0.0f, c, 5);
    for (int i = 0; i < 10; i++) assert_true(isnan(c[i]));
}

/* The packing buffers are per thread (Note [Packing buffers] in dk_sgemm.c): two threads
 * multiplying at once, over and over, each with several slabs and blocks, get the same bits as
 * the same products made by one thread alone (same micro-kernel, same order of operations). */
typedef struct {
    bool ta, tb;
    int64_t m, n, k;
    mat a, b;
    float *c;
} job;

static void run_job(job *j, float *c)
{
    for (int r = 0; r < 20; r++)
        dk_sgemm(j->ta, j->tb, j->m, j->n, j->k, 1.0f, j->a.p, j->a.ld, j->b.p, j->b.ld, 0.0f, c, j->n);
}

static void *run_job_thread(void *arg)
{
    run_job(arg, ((job *)arg)->c);
    return NULL;
}

static void concurrent_calls_do_not_share_buffers(void **state)
{
    (void)state;
    job jobs[2] = {{.ta = false, .tb = true, .m = 150, .n = 90, .k = 530},
                   {.ta = true, .tb = false, .m = 190, .n = 70, .k = 300}};
    for (int i = 0; i < 2; i++) {
        job *j = &jobs[i];
        j->a = j->ta ? mat_new(j->k, j->m, j->m) : mat_new(j->m, j->k, j->k);
        j->b = j->tb ? mat_new(j->n, j->k, j->k) : mat_new(j->k, j->n, j->n);
        j->c = malloc((size_t)(j->m * j->n) * sizeof(float));
        assert_non_null(j->c);
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, run_job_thread, &jobs[i]), 0);
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < 2; i++) {
        job *j = &jobs[i];
        float *alone = malloc((size_t)(j->m * j->n) * sizeof(float));
        assert_non_null(alone);
        run_job(j, alone);
        assert_memory_equal(alone, j->c, (size_t)(j->m * j->n) * sizeof(float));
        free(alone);
        free(j->a.p);
        free(j->b.p);
        free(j->c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        dkt_test(every_shape_with_every_micro_kernel),
        dkt_test(products_larger_than_one_block),
        dkt_test(beta_zero_ignores_nan_in_c),
        dkt_test(empty_products_scale_c),
        dkt_test(concurrent_calls_do_not_share_buffers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

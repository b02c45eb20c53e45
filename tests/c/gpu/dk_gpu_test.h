/*
 * gpu/dk_gpu_test.h — runs one kernel test on either side of the GPU line: the same test file
 * builds twice.
 *
 *   emulated (DKT_GPU_EMULATED, make test-c): the GPU kernels were compiled with the host
 *     compiler (Note [Emulating a GPU on the host] in dk_gpu_emu.h) and linked in; "device"
 *     tensors are the host tensors themselves, and the GPU entry points are called directly.
 *   real (make test-gpu): the backend library named by DK_TEST_GPU_LIB is loaded; device tensors
 *     are allocated and filled through its backend object, the op is called through the
 *     dispatcher (so registration and device guards are tested too), and results come back to
 *     the host. With no library or no device, the test prints why and exits 0: SKIPPED.
 */
#ifndef DK_GPU_TEST_H
#define DK_GPU_TEST_H

#include <stdlib.h>

#include "dk_kernel_test.h"

/* A host tensor and its device twin. */
typedef struct {
    dkk_tensor *host;
    dk_tensor dev; /* host->t itself when emulated */
    void *mem;     /* device memory (real GPU only) */
} dkg_tensor;

#ifdef DKT_GPU_EMULATED
static DLDevice dkg_device __attribute__((unused)) = {kDLCPU, 0};
static int dkg_setup(void) { return 0; }
#else
static DLDevice dkg_device = {kDLCUDA, 0};
/* Loads the backend and finds a device; returns 1 (after printing why) when there is none. */
static int dkg_setup(void)
{
    const char *lib = getenv("DK_TEST_GPU_LIB");
    if (!lib || !*lib) {
        printf("SKIPPED: no GPU backend library given (DK_TEST_GPU_LIB)\n");
        return 1;
    }
    if (dk_load_backend(lib) != DK_OK) {
        printf("SKIPPED: cannot load %s: %s\n", lib, dk_last_error());
        return 1;
    }
    const char *type = getenv("DK_TEST_GPU_TYPE");
    dkg_device.device_type = type && !strcmp(type, "hip") ? kDLROCM : kDLCUDA;
    if (dk_device_available(dkg_device) != DK_OK) {
        printf("SKIPPED: no GPU here (%s)\n", dk_last_error());
        return 1;
    }
    return 0;
}
#endif

/* The device twin of h (its contents copied over). */
static inline void dkg_up(dkg_tensor *g, dkk_tensor *h)
{
    g->host = h;
    g->dev = h->t;
    g->mem = NULL;
#ifndef DKT_GPU_EMULATED
    assert_ok(dk_device_alloc(dkg_device, h->bytes, &g->mem));
    assert_ok(dk_device_copy(dkg_device, g->mem, h->mem, h->bytes, DK_COPY_HOST_TO_DEVICE));
    g->dev.data = g->mem;
    g->dev.device = dkg_device;
#endif
}

/* The device twin's contents back into its host tensor. */
static inline void dkg_down(dkg_tensor *g)
{
#ifndef DKT_GPU_EMULATED
    assert_ok(dk_device_copy(dkg_device, g->host->mem, g->mem, g->host->bytes, DK_COPY_DEVICE_TO_HOST));
    assert_ok(dk_device_synchronize(dkg_device));
#else
    (void)g;
#endif
}

static inline void dkg_release(dkg_tensor *g)
{
#ifndef DKT_GPU_EMULATED
    if (g->mem) dk_device_free(dkg_device, g->mem);
    assert_ok(dk_device_synchronize(dkg_device));
#endif
    g->mem = NULL;
}

/* n boxes [n, 4] in a few clusters (so that many overlap) and their scores, with ties and a
 * NaN or two; `hostile` adds NaN and infinite boxes, negative scores and -0. */
static inline void dkg_clustered_boxes(dkk_tensor *b, dkk_tensor *s, dkk_rng *r, int64_t n, bool hostile)
{
    for (int64_t i = 0; i < n; i++) {
        const double cx = 40.0 * (double)(dkk_u64(r) % 4) + dkk_uniform(r, 0, 12);
        const double cy = 40.0 * (double)(dkk_u64(r) % 3) + dkk_uniform(r, 0, 12);
        const double w = dkk_uniform(r, 4, 30), h = dkk_uniform(r, 4, 30);
        double v[4] = {cx, cy, cx + w, cy + h};
        if (hostile && i % 89 == 17) v[i % 4] = i % 2 ? NAN : INFINITY;
        for (int d = 0; d < 4; d++) dkk_set(b, (int64_t[]){i, d}, v[d]);
        double sc = (double)(dkk_u64(r) % 50) / 50.0; /* ties */
        if (i % 97 == 13) sc = NAN;
        if (hostile && i % 61 == 7) sc = -0.25;
        if (hostile && i % 71 == 9) sc = -0.0;
        dkk_set(s, (int64_t[]){i}, sc);
    }
}

/* keep[0:num] and num from the GPU equal to the CPU's (Note [Data-dependent output sizes] in
 * ops/nms.h): the same boxes, in the same order. */
static inline void dkg_assert_same_keep(const dkk_tensor *keep, const dkk_tensor *num, const dkk_tensor *gkeep,
                                        const dkk_tensor *gnum, const char *what)
{
    const int64_t m = ((const int64_t *)num->mem)[0], gm = ((const int64_t *)gnum->mem)[0];
    if (m != gm) fail_msg("%s: the GPU kept %lld boxes, the CPU %lld", what, (long long)gm, (long long)m);
    for (int64_t i = 0; i < m; i++) {
        const int64_t c = (int64_t)dkk_get(keep, (int64_t[]){i}), g = (int64_t)dkk_get(gkeep, (int64_t[]){i});
        if (c != g)
            fail_msg("%s: keep[%lld] is %lld on the GPU, %lld on the CPU", what, (long long)i, (long long)g,
                     (long long)c);
    }
}

/*
 * The GPU's values against the CPU's. Emulated, the GPU kernels run the shared math with the
 * host's compiler and C library, so every bit must agree. On a real GPU:
 *   - the device's libraries compute sin, cos, atan and exp to within an ulp or two of the C
 *     library's, so values that go through them are compared within `tol` (relative and
 *     absolute);
 *   - all else is exact there (every GPU kernel is built without contraction: Note [Exact GPU
 *     arithmetic] in csrc/gpu/rules.mk), and callers pass tol 0 for it; but a NaN is only a
 *     NaN: its sign and payload are the hardware's (dkk_assert_same_values). An H100 and an x86
 *     CPU give NaNs of other bits for the same NaN or infinite box.
 */
static inline void dkg_assert_same_values(const dkk_tensor *gpu, const dkk_tensor *cpu, double tol, const char *what)
{
#ifdef DKT_GPU_EMULATED
    (void)tol;
    dkk_assert_identical(gpu, cpu, what);
#else
    if (tol == 0) dkk_assert_same_values(gpu, cpu, what);
    else dkk_assert_close(gpu, cpu, tol, tol, what);
#endif
}

#endif /* DK_GPU_TEST_H */

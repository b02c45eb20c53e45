/*
 * check_myvendor.c — loads libdkit_myvendor.so and checks that ops on its device (kDLExtDev)
 * give the CPU results.
 *
 *     check_myvendor path/to/libdkit_myvendor.so
 *
 * roi_align_forward runs on the backend's own kernel, which computes with dkit's public
 * per-element math (kernels/roi_align_math.h) and so equals the CPU kernel to rounding (the CPU
 * kernel sums the same samples in another order); roi_align_backward runs on the CPU kernel
 * through dkit's CPU fallback, copies in and out, and equals it bit for bit. The toy device's
 * memory is host memory, so this program hands the library host buffers labelled kDLExtDev;
 * the Python package allocates it through the library instead. Exit status 0 when every check
 * passes.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dkit.h"
#include "roi_align.h"

static int check_failures, check_count;

static void check(int ok, const char *what)
{
    check_count++;
    if (!ok) check_failures++;
    printf("  [%s] %s\n", ok ? "ok" : "FAIL", what);
    if (!ok && dk_last_error()[0]) printf("         last dkit error: %s\n", dk_last_error());
}

static dk_tensor make_tensor(void *data, int ndim, int64_t *shape, int64_t *strides, int32_t device_type)
{
    dk_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = device_type;
    t.ndim = ndim;
    t.shape = shape;
    t.strides = strides;
    t.dtype = dk_dtype_to_dl(DK_FLOAT32);
    return t;
}

static float *alloc_floats(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof *p);
    if (!p) {
        fprintf(stderr, "check_myvendor: out of memory\n");
        exit(2);
    }
    return p;
}

/* Deterministic pseudo-random values in [-1, 1). */
static void fill(float *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
    }
}

enum { N = 2, C = 3, H = 9, W = 7, K = 5, PH = 3, PW = 2 };
#define IN_NUMEL ((size_t)N * C * H * W)
#define OUT_NUMEL ((size_t)K * C * PH * PW)

/* Boxes in input pixels: batch index, x1, y1, x2, y2. One box hangs over the edge. */
static float rois_data[K * 5] = {
    0,    0.0f, 0.0f, 6.0f,  8.0f,  1,    1.5f,  2.25f, 4.0f, 6.5f, 0,    3.0f, 1.0f,
    3.5f, 1.2f, 1,    -2.0f, -1.0f, 9.0f, 10.0f, 1,     2.0f, 2.0f, 5.0f, 7.0f,
};

/* Runs forward (and backward on its result) on tensors of `device_type`; returns the status of
 * the first failing call. `in_strides` NULL means contiguous. */
static dk_status run_roi_align(int32_t device_type, int64_t pool_mode, const float *input, int64_t *in_strides,
                               const float *grad_out, float *out, float *amy, float *amx, float *grad_in)
{
    int64_t in_shape[4] = {N, C, H, W}, roi_shape[2] = {K, 5}, out_shape[4] = {K, C, PH, PW};
    dk_tensor tin = make_tensor((void *)input, 4, in_shape, in_strides, device_type);
    dk_tensor trois = make_tensor(rois_data, 2, roi_shape, NULL, device_type);
    dk_tensor tout = make_tensor(out, 4, out_shape, NULL, device_type);
    dk_tensor tamy = make_tensor(amy, 4, out_shape, NULL, device_type);
    dk_tensor tamx = make_tensor(amx, 4, out_shape, NULL, device_type);
    dk_tensor tgout = make_tensor((void *)grad_out, 4, out_shape, NULL, device_type);
    dk_tensor tgin = make_tensor(grad_in, 4, in_shape, NULL, device_type);
    int max = pool_mode == DK_POOL_MAX;
    dk_status st = dk_roi_align_forward(&tin, &trois, &tout, max ? &tamy : NULL, max ? &tamx : NULL, PH, PW, 0.5, 2,
                                        pool_mode, true);
    if (st != DK_OK) return st;
    return dk_roi_align_backward(&tgout, &trois, max ? &tamy : NULL, max ? &tamx : NULL, &tgin, PH, PW, 0.5, 2,
                                 pool_mode, true);
}

/* One configuration on CPU and on the toy device; every output must match bit for bit. */
static void compare_with_cpu(const char *label, int64_t pool_mode, int64_t *in_strides)
{
    float *input = alloc_floats(IN_NUMEL), *grad_out = alloc_floats(OUT_NUMEL);
    float *cpu[4], *dev[4]; /* output, argmax_y, argmax_x, grad_input */
    size_t sizes[4] = {OUT_NUMEL, OUT_NUMEL, OUT_NUMEL, IN_NUMEL};
    for (int i = 0; i < 4; i++) {
        cpu[i] = alloc_floats(sizes[i]);
        dev[i] = alloc_floats(sizes[i]);
    }
    fill(input, IN_NUMEL, 1);
    fill(grad_out, OUT_NUMEL, 2);

    dk_status a = run_roi_align(kDLCPU, pool_mode, input, in_strides, grad_out, cpu[0], cpu[1], cpu[2], cpu[3]);
    dk_status b = run_roi_align(kDLExtDev, pool_mode, input, in_strides, grad_out, dev[0], dev[1], dev[2], dev[3]);
    int same = a == DK_OK && b == DK_OK;
    /* forward (output, argmax) to rounding; the argmax are sample coordinates, equal whenever the
     * maxima are, and the backward's gradient, computed on the CPU from them, is then bit for bit */
    for (int i = 0; i < 3 && same; i++)
        for (size_t j = 0; j < sizes[i] && same; j++)
            same = fabsf(cpu[i][j] - dev[i][j]) <= 1e-6f * (1.0f + fabsf(cpu[i][j]));
    same = same && memcmp(cpu[3], dev[3], sizes[3] * sizeof(float)) == 0;
    char what[160];
    snprintf(what, sizeof what, "%s: forward and backward on myvendor equal the CPU results", label);
    check(same, what);

    for (int i = 0; i < 4; i++) {
        free(cpu[i]);
        free(dev[i]);
    }
    free(input);
    free(grad_out);
}

static int table_row(const dk_op *op, dk_key key, dk_table_entry *out)
{
    dk_table_entry e[DK_NUM_KEYS];
    int n = dk_op_table(op, e, DK_NUM_KEYS);
    for (int i = 0; i < n && i < DK_NUM_KEYS; i++)
        if (e[i].key == key) {
            *out = e[i];
            return 1;
        }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s path/to/libdkit_myvendor.so\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    printf("vendor backend check: %s\n", path);

    dk_status st = dk_load_backend(path);
    check(st == DK_OK, "dk_load_backend(path)");
    if (st != DK_OK) return 1;
    check(dk_load_backend(path) == DK_OK, "loading the same path again is a no-op");

    dk_key key = dk_key_for_device_type(kDLExtDev);
    check(key != DK_KEY_UNDEFINED && strcmp(dk_key_name(key), "myvendor") == 0,
          "kDLExtDev is served by the backend key \"myvendor\"");
    int listed = 0;
    for (int i = 0; i < dk_backend_count(); i++) {
        dk_backend_info b = dk_backend_at(i);
        if (b.path && strcmp(b.name, "myvendor") == 0) listed = 1;
    }
    check(listed, "dk_backend_at lists myvendor with its path");

    /* The forward is the backend's kernel; the backward, as every other op, dkit's CPU fallback. */
    dk_table_entry e;
    check(table_row(&dk_roi_align_forward_op, key, &e) && e.provenance == DK_PROV_KERNEL && !e.boxed &&
              strcmp(e.kernel_name, "myvendor_roi_align_forward") == 0,
          "roi_align_forward's myvendor slot is the backend's own kernel");
    check(table_row(&dk_roi_align_backward_op, key, &e) && e.provenance == DK_PROV_CPU_COPY && e.boxed,
          "roi_align_backward's myvendor slot is dkit's CPU fallback");
    char *dump = dk_op_dump(&dk_roi_align_forward_op);
    if (dump) {
        printf("%s", dump);
        dk_free(dump);
    }

    compare_with_cpu("avg pooling", DK_POOL_AVG, NULL);
    compare_with_cpu("max pooling (argmax outputs)", DK_POOL_MAX, NULL);
    /* The same values read through channels-last strides: headers, strides included, are
     * passed on unchanged. */
    int64_t nhwc[4] = {(int64_t)H * W * C, 1, (int64_t)W * C, C};
    compare_with_cpu("channels-last input", DK_POOL_AVG, nhwc);

    /* Profile sees one call at the backend that served it, not a second one at CPU: the
     * fallback excludes functionality keys while it runs the CPU kernel. */
    {
        float *input = alloc_floats(IN_NUMEL), *out = alloc_floats(OUT_NUMEL);
        int64_t in_shape[4] = {N, C, H, W}, roi_shape[2] = {K, 5}, out_shape[4] = {K, C, PH, PW};
        dk_tensor tin = make_tensor(input, 4, in_shape, NULL, kDLExtDev);
        dk_tensor trois = make_tensor(rois_data, 2, roi_shape, NULL, kDLExtDev);
        dk_tensor tout = make_tensor(out, 4, out_shape, NULL, kDLExtDev);
        uint64_t dev_calls = 0, cpu_calls = 0, ns;
        dk_profile_reset();
        dk_tls_state saved = dk_tls_push_include(DK_KEYSET(DK_KEY_PROFILE));
        st = DK_OK;
        for (int i = 0; i < 3 && st == DK_OK; i++)
            st = dk_roi_align_forward(&tin, &trois, &tout, NULL, NULL, PH, PW, 0.5, 2, DK_POOL_AVG, true);
        dk_tls_pop(saved);
        dk_profile_get(&dk_roi_align_forward_op, key, &dev_calls, &ns);
        dk_profile_get(&dk_roi_align_forward_op, DK_KEY_CPU, &cpu_calls, &ns);
        check(st == DK_OK && dev_calls == 3 && cpu_calls == 0, "Profile counts 3 calls at myvendor and none at cpu");

        /* A batch index out of range: the outer check (toy-device tensors) cannot read RoI
         * values, the CPU check inside the fallback does, before the kernel runs. */
        float bad_rois[K * 5];
        memcpy(bad_rois, rois_data, sizeof bad_rois);
        bad_rois[5] = 7.0f;
        trois.data = bad_rois;
        st = dk_roi_align_forward(&tin, &trois, &tout, NULL, NULL, PH, PW, 0.5, 2, DK_POOL_AVG, true);
        printf("  bad batch index -> %s: %s\n", dk_status_name(st), dk_last_error());
        check(st == DK_EINDEX, "a bad RoI batch index on myvendor is refused (DK_EINDEX), not read");

        /* Mixing the toy device with CPU in one call is refused at the entry. */
        trois.data = rois_data;
        trois.device.device_type = kDLCPU;
        st = dk_roi_align_forward(&tin, &trois, &tout, NULL, NULL, PH, PW, 0.5, 2, DK_POOL_AVG, true);
        printf("  mixed devices -> %s: %s\n", dk_status_name(st), dk_last_error());
        check(st == DK_EINVAL && strstr(dk_last_error(), "myvendor") != NULL,
              "myvendor and cpu tensors in one call: an error naming both devices");
        free(input);
        free(out);
    }

    /* Unloading undoes the entry point's registrations: the key, the kernel and the fallback. */
    check(dk_unload_backend("myvendor") == DK_OK && dk_key_for_device_type(kDLExtDev) == DK_KEY_UNDEFINED &&
              !table_row(&dk_roi_align_forward_op, key, &e) && !table_row(&dk_roi_align_backward_op, key, &e),
          "dk_unload_backend(\"myvendor\") removes its key, kernel and fallback");

    printf("vendor backend check: %d/%d passed\n", check_count - check_failures, check_count);
    return check_failures ? 1 : 0;
}

/*
 * bench_gpu.c — each GPU kernel against the CPU kernel on the same data (make bench-gpu, which
 * runs it through bench_gpu.py, which adds torchvision's CUDA ops where torch has CUDA).
 *
 *     bench_gpu LIB KIND [ONLY]   LIB: libdkit_cuda.so or libdkit_hip.so, KIND: cuda or hip,
 *                                 ONLY: run only the cases whose name starts with it
 *
 * Prints one line per case: `case <name> gpu_ms <t> cpu_ms <t>` (medians of 11 calls, the GPU
 * ones each followed by a synchronisation, after 2 warm-up calls), or one line saying why it
 * cannot run (no device). Device tensors are allocated and filled through the backend object;
 * ops are called through the dispatcher, as any caller would.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "box_iou.h"
#include "rotated.h" /* ops/rotated.h */
#include "dk_tunables.h"
#include "dkit.h"
#include "nms.h"
#include "roi_align.h"
#include "roi_pool.h"

static DLDevice dev = {kDLCUDA, 0};
static const DLDevice host = {kDLCPU, 0};

typedef struct {
    dk_tensor t;
    int64_t shape[4];
} tensor;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint64_t rng = 88172645463325252ull;
static double uniform(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* *x: a contiguous tensor of `dt` on `where`, filled from `src` (host memory) when given. Made in
 * place: its dk_tensor points at its own shape array. */
static void make(tensor *xp, DLDevice where, dk_dtype dt, int ndim, const int64_t *shape, const void *src)
{
    tensor x;
    memset(&x, 0, sizeof x);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) x.shape[i] = shape[i], n *= (size_t)shape[i];
    const size_t bytes = n * dk_dtype_size(dt);
    void *p = NULL;
    if (dk_device_alloc(where, bytes, &p)) {
        fprintf(stderr, "bench_gpu: %s\n", dk_last_error());
        exit(1);
    }
    if (src && dk_device_copy(where, p, src, bytes, DK_COPY_HOST_TO_DEVICE)) {
        fprintf(stderr, "bench_gpu: %s\n", dk_last_error());
        exit(1);
    }
    x.t.data = p;
    x.t.device = where;
    x.t.ndim = ndim;
    x.t.dtype = dk_dtype_to_dl(dt);
    *xp = x;
    xp->t.shape = xp->shape;
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median ms of 11 calls of fn(ctx, on_gpu). */
typedef dk_status (*case_fn)(void *ctx, int gpu);
static double time_it(case_fn fn, void *ctx, int gpu)
{
    double t[11];
    for (int i = -2; i < 11; i++) {
        const double t0 = now_ms();
        if (fn(ctx, gpu) || (gpu && dk_device_synchronize(dev))) {
            fprintf(stderr, "bench_gpu: %s\n", dk_last_error());
            exit(1);
        }
        if (i >= 0) t[i] = now_ms() - t0;
    }
    qsort(t, 11, sizeof t[0], cmp);
    return t[5];
}

/* roi_align: [2, 256, 200, 272] float32, 1024 boxes, 7x7, scale 0.25, sampling_ratio 2, aligned
 * (bench_roi_align.py's case). */
typedef struct {
    tensor x[2], rois[2], out[2], gin[2];
} ra_case;

static dk_status ra_forward(void *c, int gpu)
{
    ra_case *r = c;
    return dk_roi_align_forward(&r->x[gpu].t, &r->rois[gpu].t, &r->out[gpu].t, NULL, NULL, 7, 7, 0.25, 2, DK_POOL_AVG,
                                true);
}

static dk_status ra_backward(void *c, int gpu)
{
    ra_case *r = c;
    return dk_roi_align_backward(&r->out[gpu].t, &r->rois[gpu].t, NULL, NULL, &r->gin[gpu].t, 7, 7, 0.25, 2,
                                 DK_POOL_AVG, true);
}

/* The RoI pooling family (bench_gpu_calls.py's cases): roi_pool on [2, 256, 200, 272], scale
 * 0.25; ps_roi_pool and ps_roi_align on [2, 490, 100, 136] (10 x 7 x 7 channels), scale 1/8,
 * ps_roi_align's adaptive sampling; 1024 boxes, 7 x 7. */
typedef struct {
    tensor x[2], rois[2], out[2], arg[2], gin[2];
    int op; /* 0 roi_pool, 1 ps_roi_pool, 2 ps_roi_align */
} rp_case;

static dk_status rp_forward(void *c, int gpu)
{
    rp_case *r = c;
    if (r->op == 0)
        return dk_roi_pool_forward(&r->x[gpu].t, &r->rois[gpu].t, &r->out[gpu].t, &r->arg[gpu].t, 7, 7, 0.25, 0);
    if (r->op == 1) return dk_ps_roi_pool_forward(&r->x[gpu].t, &r->rois[gpu].t, &r->out[gpu].t, 0.125);
    return dk_ps_roi_align_forward(&r->x[gpu].t, &r->rois[gpu].t, &r->out[gpu].t, 0.125, -1);
}

static dk_status rp_backward(void *c, int gpu)
{
    rp_case *r = c;
    if (r->op == 0) return dk_roi_pool_backward(&r->out[gpu].t, &r->rois[gpu].t, &r->arg[gpu].t, &r->gin[gpu].t);
    if (r->op == 1) return dk_ps_roi_pool_backward(&r->out[gpu].t, &r->rois[gpu].t, &r->gin[gpu].t, 0.125);
    return dk_ps_roi_align_backward(&r->out[gpu].t, &r->rois[gpu].t, &r->gin[gpu].t, 0.125, -1);
}

static void rp_bench(int op, const float *rois)
{
    static const char *names[] = {"roi_pool", "ps_roi_pool", "ps_roi_align"};
    const int64_t xs0[4] = {2, 256, 200, 272}, xs1[4] = {2, 490, 100, 136}, rs[2] = {1024, 5};
    const int64_t *xs = op ? xs1 : xs0, os[4] = {1024, op ? 10 : 256, 7, 7};
    const size_t nx = (size_t)(xs[0] * xs[1] * xs[2] * xs[3]);
    float *x = malloc(nx * sizeof *x);
    for (size_t i = 0; i < nx; i++) x[i] = (float)(uniform() * 2 - 1);
    rp_case r;
    r.op = op;
    for (int g = 0; g < 2; g++) {
        const DLDevice w = g ? dev : host;
        make(&r.x[g], w, DK_FLOAT32, 4, xs, x);
        make(&r.rois[g], w, DK_FLOAT32, 2, rs, rois);
        make(&r.out[g], w, DK_FLOAT32, 4, os, NULL);
        make(&r.arg[g], w, DK_INT64, 4, os, NULL);
        make(&r.gin[g], w, DK_FLOAT32, 4, xs, NULL);
    }
    const bool cpu_too = !getenv("DKIT_BENCH_GPU_ONLY"); /* set: the CPU's columns are 0 */
    printf("case %s_forward gpu_ms %.4f cpu_ms %.4f\n", names[op], time_it(rp_forward, &r, 1),
           cpu_too ? time_it(rp_forward, &r, 0) : 0.0);
    fflush(stdout);
    const double cpu = cpu_too ? time_it(rp_backward, &r, 0) : 0.0;
    printf("case %s_backward gpu_ms %.4f cpu_ms %.4f\n", names[op], time_it(rp_backward, &r, 1), cpu);
    fflush(stdout);
    if (dk_tunable_set("roi_pool.gpu_deterministic", 1, NULL) == DK_OK) {
        printf("case %s_backward_deterministic gpu_ms %.4f cpu_ms %.4f\n", names[op], time_it(rp_backward, &r, 1), cpu);
        dk_tunable_set("roi_pool.gpu_deterministic", 0, NULL);
    }
    fflush(stdout);
    free(x);
}

typedef struct {
    tensor boxes[2], scores[2], keep[2], num[2];
} nms_case;

static dk_status nms_run(void *c, int gpu)
{
    nms_case *r = c;
    return dk_nms(&r->boxes[gpu].t, &r->scores[gpu].t, NULL, &r->keep[gpu].t, &r->num[gpu].t, 0.5, 0);
}

static void nms_bench(int64_t n)
{
    float *b = malloc((size_t)n * 4 * sizeof *b), *s = malloc((size_t)n * sizeof *s);
    for (int64_t i = 0; i < n; i++) { /* proposals in clusters, as bench_nms.py's */
        const double cx = 1000 * uniform(), cy = 800 * uniform(), w = 16 + 200 * uniform(), h = 16 + 200 * uniform();
        b[4 * i] = (float)cx, b[4 * i + 1] = (float)cy, b[4 * i + 2] = (float)(cx + w), b[4 * i + 3] = (float)(cy + h);
        s[i] = (float)uniform();
    }
    nms_case c;
    for (int g = 0; g < 2; g++) {
        const DLDevice w = g ? dev : host;
        make(&c.boxes[g], w, DK_FLOAT32, 2, (int64_t[]){n, 4}, b);
        make(&c.scores[g], w, DK_FLOAT32, 1, (int64_t[]){n}, s);
        make(&c.keep[g], w, DK_INT64, 1, (int64_t[]){n}, NULL);
        make(&c.num[g], w, DK_INT64, 1, (int64_t[]){1}, NULL);
    }
    char name[64];
    snprintf(name, sizeof name, "nms_%lld_boxes", (long long)n);
    printf("case %s gpu_ms %.4f cpu_ms %.4f\n", name, time_it(nms_run, &c, 1), time_it(nms_run, &c, 0));
    fflush(stdout);
    free(b), free(s);
}

/* The box ops other than nms: boxes (and scores) on both sides, each call's outputs. */
typedef struct {
    tensor a[2], b[2], out[2], keep[2], num[2];
} box_case;

static dk_status box_iou_run(void *c, int gpu)
{
    box_case *r = c;
    return dk_box_iou(&r->a[gpu].t, &r->b[gpu].t, &r->out[gpu].t, DK_BOX_IOU, false, 1e-7, 0);
}

static dk_status box_iou_rotated_run(void *c, int gpu)
{
    box_case *r = c;
    return dk_box_iou_rotated(&r->a[gpu].t, &r->b[gpu].t, &r->out[gpu].t, 0, false, true);
}

static dk_status nms_rotated_run(void *c, int gpu)
{
    box_case *r = c;
    return dk_nms_rotated(&r->a[gpu].t, &r->b[gpu].t, NULL, &r->keep[gpu].t, &r->num[gpu].t, 0.5, true);
}

static dk_status soft_nms_run(void *c, int gpu)
{
    box_case *r = c;
    return dk_soft_nms(&r->a[gpu].t, &r->b[gpu].t, &r->out[gpu].t, &r->keep[gpu].t, &r->num[gpu].t, 0.3, 0.5, 0.001,
                       DK_SOFT_NMS_GAUSSIAN, 0);
}

/* n boxes of `width` values (x1 y1 x2 y2, or rotated cx cy w h angle) in a 1000 x 800 image, as
 * nms_bench's proposals. */
static float *random_boxes(int64_t n, int width)
{
    float *b = malloc((size_t)n * (size_t)width * sizeof *b);
    for (int64_t i = 0; i < n; i++) {
        const double x = 1000 * uniform(), y = 800 * uniform(), w = 16 + 200 * uniform(), h = 16 + 200 * uniform();
        float *r = b + i * width;
        if (width == 4) r[0] = (float)x, r[1] = (float)y, r[2] = (float)(x + w), r[3] = (float)(y + h);
        else
            r[0] = (float)x, r[1] = (float)y, r[2] = (float)w, r[3] = (float)h, r[4] = (float)(6.28 * uniform() - 3.14);
    }
    return b;
}

/* One case: `a` are n boxes of `width` values; `b` m more boxes (m > 0) or n scores (m == 0);
 * out is [n, out_cols] (or absent: 0), keep and num as the NMS ops want them. */
static void box_bench(const char *name, case_fn fn, int64_t n, int64_t m, int width, int64_t out_cols)
{
    float *a = random_boxes(n, width), *b = m ? random_boxes(m, width) : malloc((size_t)n * sizeof *b);
    for (int64_t i = 0; !m && i < n; i++) b[i] = (float)uniform();
    box_case c;
    for (int g = 0; g < 2; g++) {
        const DLDevice w = g ? dev : host;
        make(&c.a[g], w, DK_FLOAT32, 2, (int64_t[]){n, width}, a);
        if (m) make(&c.b[g], w, DK_FLOAT32, 2, (int64_t[]){m, width}, b);
        else make(&c.b[g], w, DK_FLOAT32, 1, (int64_t[]){n}, b);
        if (out_cols) make(&c.out[g], w, DK_FLOAT32, 2, (int64_t[]){n, out_cols}, NULL);
        make(&c.keep[g], w, DK_INT64, 1, (int64_t[]){n}, NULL);
        make(&c.num[g], w, DK_INT64, 1, (int64_t[]){1}, NULL);
    }
    printf("case %s gpu_ms %.4f cpu_ms %.4f\n", name, time_it(fn, &c, 1), time_it(fn, &c, 0));
    fflush(stdout);
    free(a), free(b);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_gpu LIB cuda|hip\n");
        return 2;
    }
    if (dk_load_backend(argv[1])) {
        printf("skipped: cannot load %s: %s\n", argv[1], dk_last_error());
        return 0;
    }
    if (!strcmp(argv[2], "hip")) dev.device_type = kDLROCM;
    if (dk_device_available(dev)) {
        printf("skipped: no GPU here (%s)\n", dk_last_error());
        return 0;
    }
    const int64_t xs[4] = {2, 256, 200, 272}, rs[2] = {1024, 5}, os[4] = {1024, 256, 7, 7};
    const size_t nx = 2 * 256 * 200 * 272;
    float *x = malloc(nx * sizeof *x), *rois = malloc(1024 * 5 * sizeof *rois);
    for (size_t i = 0; i < nx; i++) x[i] = (float)(uniform() * 2 - 1);
    for (int k = 0; k < 1024; k++) { /* sizes from 16 px to half the 800 x 1088 image */
        const double w = 16 + 400 * uniform(), h = 16 + 400 * uniform(), cx = 1088 * uniform(), cy = 800 * uniform();
        const float v[5] = {(float)(k % 2), (float)(cx - w / 2), (float)(cy - h / 2), (float)(cx + w / 2),
                            (float)(cy + h / 2)};
        memcpy(rois + 5 * k, v, sizeof v);
    }
    const char *only = argc > 3 ? argv[3] : "";
    for (int op = 0; op < 3; op++) {
        static const char *names[] = {"roi_pool", "ps_roi_pool", "ps_roi_align"};
        if (!strncmp(names[op], only, strlen(only))) rp_bench(op, rois);
    }
    if (*only && strncmp("roi_align", only, strlen(only))) {
        free(x), free(rois);
        return 0;
    }
    ra_case r;
    for (int g = 0; g < 2; g++) {
        const DLDevice w = g ? dev : host;
        make(&r.x[g], w, DK_FLOAT32, 4, xs, x);
        make(&r.rois[g], w, DK_FLOAT32, 2, rs, rois);
        make(&r.out[g], w, DK_FLOAT32, 4, os, NULL);
        make(&r.gin[g], w, DK_FLOAT32, 4, xs, NULL);
    }
    printf("case roi_align_forward gpu_ms %.4f cpu_ms %.4f\n", time_it(ra_forward, &r, 1), time_it(ra_forward, &r, 0));
    fflush(stdout);
    const double atomic = time_it(ra_backward, &r, 1), cpu = time_it(ra_backward, &r, 0);
    printf("case roi_align_backward gpu_ms %.4f cpu_ms %.4f\n", atomic, cpu);
    fflush(stdout);
    if (dk_tunable_set("roi_align.gpu_deterministic", 1, NULL) == DK_OK) {
        printf("case roi_align_backward_deterministic gpu_ms %.4f cpu_ms %.4f\n", time_it(ra_backward, &r, 1), cpu);
        dk_tunable_set("roi_align.gpu_deterministic", 0, NULL);
    }
    fflush(stdout);
    nms_bench(10000);
    nms_bench(100000);
    box_bench("box_iou_4000x4000", box_iou_run, 4000, 4000, 4, 4000);
    box_bench("box_iou_rotated_1000x1000", box_iou_rotated_run, 1000, 1000, 5, 1000);
    box_bench("nms_rotated_10000_boxes", nms_rotated_run, 10000, 0, 5, 0);
    box_bench("soft_nms_2000_boxes", soft_nms_run, 2000, 0, 4, 5);
    free(x), free(rois);
    return 0;
}

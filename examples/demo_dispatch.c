/*
 * examples/demo_dispatch.c — a tour of dkit's dispatcher, from C, on the real roi_align_forward.
 *
 * It defines no op and no backend kernel; everything it shows is what any caller of dkit gets:
 *   1. the op's schema and its computed dispatch table
 *   2. one call with dispatch tracing on
 *   3. a functionality kernel ("Logging") on a claimed key: boxed, prints the call, redispatches
 *   4. the built-in Profile key
 *   5. errors: a device nobody has a kernel for, and tensors on two devices in one call
 *
 * Build and run: make demo (or make build/demo_dispatch && build/demo_dispatch).
 * Trace lines go to stderr; everything else to stdout.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dkit.h"
#include "roi_align.h"

/* ------------------------------------------------------------------------------------------ */
/* Small helpers                                                                              */

static void demo_section(const char *title)
{
    fflush(stderr);
    printf("\n=== %s\n", title);
    fflush(stdout);
}

/* Prints a dk_* status the way a caller would see it: status name, and the message. */
static void demo_report(const char *what, dk_status st)
{
    if (st == DK_OK) printf("  %s -> DK_OK\n", what);
    else printf("  %s -> %s\n      \"%s\"\n", what, dk_status_name(st), dk_last_error());
    fflush(stdout);
}

/* Prints text indented, so a table reads as part of its section; frees it (dk_free). */
static void demo_print_indented(char *s, const char *what)
{
    if (!s) {
        printf("  (%s failed: %s)\n", what, dk_last_error());
        return;
    }
    for (const char *p = s; *p;) {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        printf("  %.*s\n", len, p);
        p += len + (nl ? 1 : 0);
    }
    dk_free(s);
}

static void demo_dump(const dk_op *op) { demo_print_indented(dk_op_dump(op), "dk_op_dump"); }

static dk_tensor demo_tensor(void *data, int ndim, int64_t *shape)
{
    dk_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.ndim = ndim;
    t.shape = shape;
    t.dtype = dk_dtype_to_dl(DK_FLOAT32);
    return t; /* strides NULL: row-major contiguous */
}

/* The arguments of every call below; only the devices change. */
typedef struct {
    dk_tensor input, rois, output;
    int64_t aligned_height, aligned_width, sampling_ratio, pool_mode;
    double spatial_scale;
    bool aligned;
} demo_args;

static dk_status demo_call(const demo_args *a, dk_tensor *output)
{
    return dk_roi_align_forward(&a->input, &a->rois, output, NULL, NULL, a->aligned_height, a->aligned_width,
                                a->spatial_scale, a->sampling_ratio, a->pool_mode, a->aligned);
}

static void demo_print_output(const float *out, int64_t k, int64_t c, int64_t ph, int64_t pw)
{
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < c; j++) {
            printf("    roi %" PRId64 " channel %" PRId64 ":", i, j);
            for (int64_t e = 0; e < ph * pw; e++) printf(" %7.3f", out[((i * c) + j) * ph * pw + e]);
            printf("\n");
        }
}

/* ------------------------------------------------------------------------------------------ */
/* 3. A boxed functionality kernel                                                            */

/* "cpu[1, 2, 4, 4] float32" */
static void demo_describe_tensor(const dk_tensor *t, char *buf, size_t n)
{
    char dev[64];
    size_t used = (size_t)snprintf(buf, n, "%s[", dk_device_str(t->device, dev, sizeof dev));
    for (int i = 0; i < t->ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%" PRId64, i ? ", " : "", t->shape[i]);
    if (used < n) snprintf(buf + used, n - used, "] %s", dk_dtype_name(dk_tensor_dtype(t)));
}

/*
 * Serves any op, because it reads the arguments through the op's schema (op->args), not through
 * a C signature. It prints the call and redispatches: dk_op_redispatch_boxed continues with the
 * keys below Logging, so the CPU kernel still computes the result.
 */
static dk_status demo_logging_kernel(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    int *calls = ctx;
    const dk_value *v = dk_stack_args(stack, op);
    char keys[128];
    (*calls)++;
    printf("  [Logging] %s(", op->name);
    for (int i = 0; i < op->nargs; i++) {
        char desc[128];
        const char *sep = i ? ", " : "";
        switch (v[i].tag) {
        case DK_TYPE_TENSOR: demo_describe_tensor(v[i].u.t, desc, sizeof desc); break;
        case DK_TYPE_INT: snprintf(desc, sizeof desc, "%" PRId64, v[i].u.i); break;
        case DK_TYPE_FLOAT: snprintf(desc, sizeof desc, "%g", v[i].u.f); break;
        case DK_TYPE_BOOL: snprintf(desc, sizeof desc, "%s", v[i].u.b ? "true" : "false"); break;
        case DK_TYPE_NONE: snprintf(desc, sizeof desc, "None"); break;
        default: snprintf(desc, sizeof desc, "..."); break;
        }
        printf("%s%s=%s", sep, op->args[i].name, desc);
    }
    printf(")\n  [Logging] keys %s: redispatching below Logging\n", dk_keyset_str(ks, keys, sizeof keys));
    fflush(stdout);
    return dk_op_redispatch_boxed(op, ks, stack);
}

/* ------------------------------------------------------------------------------------------ */

int main(void)
{
    dk_op *op = &dk_roi_align_forward_op;
    dk_status st;

    /* One image, two channels of 4x4 (values 0..31), two boxes, 2x2 average bins. */
    enum { N = 1, C = 2, H = 4, W = 4, K = 2, PH = 2, PW = 2 };
    static float input[N * C * H * W], output[K * C * PH * PW], reference[K * C * PH * PW];
    static float rois[K * 5] = {0, 0, 0, 3, 3, /* whole image */ 0, 1, 1, 3, 2 /* a 2x1 box */};
    int64_t in_shape[4] = {N, C, H, W}, roi_shape[2] = {K, 5}, out_shape[4] = {K, C, PH, PW};
    for (int i = 0; i < N * C * H * W; i++) input[i] = (float)i;

    demo_args a;
    a.input = demo_tensor(input, 4, in_shape);
    a.rois = demo_tensor(rois, 2, roi_shape);
    a.output = demo_tensor(output, 4, out_shape);
    a.aligned_height = PH;
    a.aligned_width = PW;
    a.spatial_scale = 1.0;
    a.sampling_ratio = 2;
    a.pool_mode = DK_POOL_AVG;
    a.aligned = true;

    printf("dkit %s: a tour of the dispatcher on roi_align_forward\n", DK_VERSION_STRING);

    /* ---------------------------------------------------------------------------------- */
    demo_section("1. The op: its schema (from its one X-macro argument list) and computed table");
    demo_dump(op);
    printf("  Each row is one dispatch key, highest priority first; a call is served by the\n"
           "  highest key in (tensor keys | thread-included) - thread-excluded.\n");

    /* ---------------------------------------------------------------------------------- */
    demo_section("2. One call, with dispatch tracing on (dk_dispatch_set_trace; or DKIT_DISPATCH_TRACE=1)");
    printf("  (the [dkit dispatch] line is printed by the dispatcher, on stderr)\n");
    fflush(stdout);
    dk_dispatch_set_trace(true);
    st = demo_call(&a, &a.output);
    fflush(stderr);
    dk_dispatch_set_trace(false);
    demo_report("dk_roi_align_forward(input, rois, output, NULL, NULL, 2, 2, 1.0, 2, avg, aligned)", st);
    if (st != DK_OK) return 1;
    demo_print_output(output, K, C, PH, PW);
    memcpy(reference, output, sizeof output);

    /* ---------------------------------------------------------------------------------- */
    demo_section("3. A functionality kernel on a claimed key: \"Logging\"");
    dk_key logging;
    int logged = 0;
    dk_handle h = NULL;
    if ((st = dk_functionality_key_register("Logging", &logging)) != DK_OK) {
        demo_report("dk_functionality_key_register(\"Logging\")", st);
        return 1;
    }
    printf("  claimed functionality key \"%s\" (bit %d, above every backend)\n", dk_key_name(logging), logging);
    st = dk_op_register(op, logging, dk_kernel_boxed(demo_logging_kernel, &logged, "demo_logging_kernel"), &h);
    demo_report("dk_op_register(roi_align_forward, Logging, boxed demo_logging_kernel)", st);
    if (st != DK_OK) return 1;
    demo_dump(op);

    printf("  A call without Logging in the thread's included set does not see it:\n");
    st = demo_call(&a, &a.output);
    demo_report("plain call", st);

    printf("  With dk_tls_push_include(DK_KEYSET(Logging)):\n");
    dk_tls_state saved = dk_tls_push_include(DK_KEYSET(logging));
    memset(output, 0, sizeof output);
    st = demo_call(&a, &a.output);
    dk_tls_pop(saved);
    demo_report("call with Logging included", st);
    printf("  Logging ran %d time(s); result %s the untraced call\n", logged,
           memcmp(output, reference, sizeof output) == 0 ? "equals" : "DIFFERS FROM");

    st = dk_unregister(h);
    demo_report("dk_unregister(handle)", st);
    printf("  The key stays claimed, so its row remains, now empty:\n");
    demo_dump(op);

    /* ---------------------------------------------------------------------------------- */
    demo_section("4. Profile: a built-in boxed fallback timing every op below it");
    dk_profile_reset();
    saved = dk_tls_push_include(DK_KEYSET(DK_KEY_PROFILE));
    for (int i = 0; i < 100 && st == DK_OK; i++) st = demo_call(&a, &a.output);
    dk_tls_pop(saved);
    demo_report("100 calls with Profile included", st);
    demo_print_indented(dk_profile_format(), "dk_profile_format");

    /* ---------------------------------------------------------------------------------- */
    demo_section("5. Errors: status + message, never an abort");
    /* These tensors point at host memory but claim to live on a GPU: no kernel is ever run
     * on them, the dispatcher refuses first. */
    demo_args g = a;
    g.input.device.device_type = kDLCUDA;
    g.rois.device.device_type = kDLCUDA;
    g.output.device.device_type = kDLCUDA;
    st = demo_call(&g, &g.output);
    demo_report("every tensor on cuda:0, no CUDA backend loaded", st);
    printf("      (Python raises NotImplementedError for DK_ENOTIMPL)\n");

    demo_args m = a;
    m.rois.device.device_type = kDLCUDA;
    st = demo_call(&m, &m.output);
    demo_report("input on cpu, rois on cuda:0", st);
    printf("      (Python raises ValueError for DK_EINVAL)\n");

    printf("\ndone.\n");
    return 0;
}

/*
 * box_iou/box_iou_cpu.c — box_iou on the CPU (ops/box_iou.h): the entry point the dispatcher
 * calls, and its registration. How it is computed: Note [Rows against columns] in box_iou_cpu.h.
 *
 * Note [Trapping math]
 * The torch-style NaN-propagating max/min of kernels/box_iou_math.h select between a value and 0, and
 * GCC moves products of such selections (wi * wi in DIoU) into the branch where the value is not
 * 0; under the default -ftrapping-math a multiplication that might raise a floating-point
 * exception may then not be executed unconditionally, so the loop is not if-converted and stays
 * scalar (10x slower for DIoU). -fno-trapping-math lifts only that: it allows no transformation
 * that changes a value (unlike -ffast-math), and dkit never reads the floating-point exception
 * flags. So this file, before anything is included, compiles without trapping math.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "box_iou_cpu.h"

#include "dk_large_output.h"
#include "dk_registry.h"
#include "dk_tunables.h"
#include "kernels/dk_template.h"

#define DK_TEMPLATE "box_iou/box_iou_rows_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_COMPUTE
#include "kernels/dk_instantiate.h"
#define DK_TEMPLATE "box_iou/box_iou_tmpl.h"
#define DK_TEMPLATE_TYPES (DK_TYPES_FLOAT | DK_TYPES_INT)
#include "kernels/dk_instantiate.h"

DK_TUNABLE(dk__box_iou_isa, "box_iou.isa", 1, 0, 1,
           "1: the AVX2 span where the CPU has AVX2, 0: the baseline (x86-64-v2) span (Note [AVX2 spans])")

DK_TUNABLE(dk__box_iou_stream, "box_iou.stream", -1, -1, 1,
           "-1: rows stream when several threads write a large fresh output, 0: never, 1: whenever they can "
           "(Note [Streaming rows])")

/* Work units of one pair, for dk_parallel_threads_for (about a roi_align sample's). */
#define DK__BOX_IOU_PAIR_WORK 2

dk_status dk_box_iou_cpu(const dk_tensor *boxes1, const dk_tensor *boxes2, dk_tensor *out, int64_t kind, bool aligned,
                         double eps, int64_t offset)
{
    const int64_t n = boxes1->shape[0], m = boxes2->shape[0];
    if (n == 0 || m == 0) return DK_OK; /* nothing to write (aligned: n == m) */
    const dk_dtype dt = dk_tensor_dtype(boxes1);
    const bool integer = dt == DK_INT8 || dt == DK_UINT8 || dt == DK_INT16 || dt == DK_INT32 || dt == DK_INT64;
    const int narrow = dk_box_iou_narrow(kind, dt);         /* Note [16-bit boxes] in kernels/box_iou_math.h */
    const size_t esz = integer || dt == DK_FLOAT64 ? 8 : 4; /* compute (SoA) element */
    /* n, m < 2^31 (ops/box_iou.c): pairs < 2^62, and twice that fits int64 */
    const int64_t pairs = aligned ? n : n * m;
    const int nthreads = dk_parallel_threads_for(pairs * DK__BOX_IOU_PAIR_WORK);
    dk__box_iou_ctx cx = {
        .n = n,
        .m = m,
        .kind = (int)kind,
        .narrow = narrow,
        .aligned = aligned,
        .eps = eps,
        .offset = (double)offset,
        .boxes1 = boxes1,
        .out = (char *)dk_tensor_data(out),
        .os0 = dk_tensor_stride(out, 0),
        .os1 = aligned ? 0 : dk_tensor_stride(out, 1),
        .odt = dk_tensor_dtype(out),
    };
#if DK__BOX_IOU_AVX2
    cx.avx2 = dk_tunable(&dk__box_iou_isa) == 1 && __builtin_cpu_supports("avx2");
#endif
    /* Tasks of whole rows: a few per thread for balance, at most 32 rows (aligned: 4096 pairs) */
    int64_t rows;
    if (aligned) rows = 4096;
    else {
        rows = n / ((int64_t)nthreads * 8);
        rows = rows < 1 ? 1 : rows > 32 ? 32 : rows;
    }
    cx.rows = rows;
    cx.tasks = (n + rows - 1) / rows;
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    dk_status st = DK_OK;
    void *soa = dk_arena_take_n(&ar, dk_sat_mul((size_t)m, 5), esz); /* box_iou_tmpl.h */
    void *buf = dk_arena_take_n(&ar, dk_sat_mul((size_t)nthreads, DK__BOX_IOU_COLS), esz);
    if (!soa || !buf) {
        dk_arena_free(&ar);
        return dk_error(DK_ENOMEM, "box_iou: out of memory for the scratch of %lld boxes", (long long)m);
    }
    cx.soa = soa;
    cx.buf = buf;
    /* 4,000 x 4,000 pairs are 64 MB of fresh output: fault it in 2 MiB at a time (Note [Huge
     * pages for large outputs] in dk_large_output.h) */
    dk_large_output lo;
    dk_large_output_prepare(&lo, cx.out, out->ndim, out->shape, aligned ? &cx.os0 : (const int64_t[]){cx.os0, cx.os1},
                            dk_dtype_size(cx.odt), true); /* lo.fill: not faulted in yet */
    /* Note [Streaming rows]: several threads, a large output, rows 16-byte aligned. */
    const int64_t stream = dk_tunable(&dk__box_iou_stream);
    cx.stream = (stream == 1 || (stream == -1 && nthreads > 1 && lo.fill)) && !aligned && cx.os1 == 1 &&
                (uintptr_t)cx.out % 16 == 0 && cx.os0 * (int64_t)dk_dtype_size(cx.odt) % 16 == 0 &&
                (dt == DK_FLOAT32 || dt == DK_FLOAT64);
    if (integer) {
        DK_SWITCH_INT(dt, st, dk__box_iou_run, (&cx, nthreads, boxes2),
                      st = dk_error(DK_ETYPE, "box_iou: unsupported dtype"))
    } else {
        DK_SWITCH_FLOAT(dt, st, dk__box_iou_run, (&cx, nthreads, boxes2),
                        st = dk_error(DK_ETYPE, "box_iou: unsupported dtype"))
    }
    dk_arena_free(&ar);
    return st;
}

DK_REGISTER_DEVICE_IMPL(box_iou, CPU, dk_box_iou_cpu)

/*
 * fuzz_boxed.c — boxed calls (dk_op_call_boxed, dk_boxed.c) of every registered op on stacks
 * built from the input, and dk_op_redispatch_boxed from boxed kernels.
 *
 * The op is any of the op list (dk_op_count, dk_op_at), so an op added to the core is fuzzed
 * here without a change. Its stack is built from its schema: a few unrelated values below the
 * arguments (the call must neither read nor pop them), then one value per argument, usually of
 * the kind the schema wants, sometimes of another tag, None, a NULL tensor or string, or a value
 * missing altogether (a stack shorter than the op's arguments). Tensors take their sizes from a
 * small pool shared by the whole stack (so that shapes agree often enough for calls to reach the
 * kernels: [K, 5] rois beside [K, C, PH, PW] outputs, [N, 4] boxes beside [N] scores), any
 * dtype and layout (fuzz_common.h), a device no backend serves, or a malformed DLTensor (rank
 * past DK_MAX_NDIM over a shorter array, negative rank, NULL shape, a broken dtype, a byte offset
 * past 2^63, strides whose offsets overflow, NULL data with elements): Note [Untrusted tensors]
 * counts a boxed stack among the tensors from outside, validated before anything reads them.
 * Integers are small or far out of range; floats anything, NaN included.
 *
 * The input is laid out in fixed places, so that a mutation of one argument leaves the others as
 * they were: a 12-byte header (tunables, op, size pool, stack shape, two list items), 8 bytes for
 * the values below the arguments, then FZ_ARG_BYTES per argument (missing bytes read as zeros).
 *
 * Some calls run with a functionality key included on the thread: this target's own, whose boxed
 * fallback checks the stack the entry boxed for it and redispatches (dk_op_redispatch_boxed), or
 * Profile, whose fallback times the redispatch, or both.
 *
 * Contracts (a broken one aborts with "contract broken: ..."): a known status; a failure has a
 * message; a call with a malformed tensor, a missing argument or a wrong tag fails; the stack
 * loses exactly the op's arguments (nothing when it was too short) and the values below them are
 * untouched; and fz_verify for every tensor: a failure changes nothing, a success writes only the
 * elements of output arguments, never an output whose elements overlap.
 */
#include "fuzz_common.h"

#include "dk_check.h"

#define FZ_HEADER_BYTES 12
#define FZ_BELOW_BYTES 8
#define FZ_ARG_BYTES 32

/* The next `n` bytes of the input as an input of their own (fewer where it ends). */
static fz_in fz_chunk(fz_in *in, size_t n)
{
    fz_in c = {in->p, in->n < n ? in->n : n};
    in->p += c.n;
    in->n -= c.n;
    return c;
}

/* Values of an int argument: small, or far out of any range (never a large positive count below
 * 2^31: an op may honour it as a cost, e.g. roi_align's sampling_ratio). */
static int64_t fz_int_arg(fz_in *in)
{
    const uint8_t b = fz_u8(in);
    if (b < 224) return (int64_t)(b % 12) - 2;
    static const int64_t odd[] = {16,        (int64_t)INT32_MAX + 1, INT64_MAX,        INT64_MIN,
                                  INT32_MIN, -((int64_t)1 << 40),    (int64_t)1 << 40, -1000};
    return odd[b % 8];
}

/* ------------------------------------------------------------------------------------------ */
/* The boxed fallback of this target's functionality key                                       */

static dk_key fz_key = DK_KEY_UNDEFINED;
static int fz_fallback_calls;

/* Entered from an op's entry after its checks: the stack holds exactly the op's arguments, boxed
 * by the generated code with the schema's tags. It passes them on below its key. */
static dk_status fz_fallback(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    (void)ctx;
    fz_fallback_calls++;
    FZ_ASSERT(stack->size == op->nargs, "%s: the fallback's stack holds %d values for %d arguments", op->name,
              stack->size, op->nargs);
    FZ_ASSERT(dk_keyset_highest(ks) == fz_key, "%s: the fallback runs for key %d, not its own", op->name,
              dk_keyset_highest(ks));
    const dk_value *v = dk_stack_args(stack, op);
    for (int i = 0; i < op->nargs; i++) {
        const dk_arg_kind k = op->args[i].kind;
        bool ok;
        switch (k) {
        case DK_ARG_TENSOR: ok = v[i].tag == DK_TYPE_TENSOR && v[i].u.t; break;
        case DK_ARG_OPT_TENSOR: ok = v[i].tag == DK_TYPE_NONE || (v[i].tag == DK_TYPE_TENSOR && v[i].u.t); break;
        case DK_ARG_INT: ok = v[i].tag == DK_TYPE_INT; break;
        case DK_ARG_FLOAT: ok = v[i].tag == DK_TYPE_FLOAT; break;
        case DK_ARG_BOOL: ok = v[i].tag == DK_TYPE_BOOL; break;
        case DK_ARG_STR: ok = v[i].tag == DK_TYPE_STR; break;
        default: ok = v[i].tag == DK_TYPE_INT_LIST; break;
        }
        FZ_ASSERT(ok, "%s: argument %d reached the fallback with tag %d for kind %d", op->name, i, (int)v[i].tag,
                  (int)k);
    }
    return dk_op_redispatch_boxed(op, ks, stack);
}

static void fz_setup(void)
{
    if (fz_key != DK_KEY_UNDEFINED) return;
    if (dk_functionality_key_register("fuzz_boxed", &fz_key) != DK_OK ||
        dk_register_fallback(fz_key, dk_kernel_boxed(fz_fallback, NULL, "fuzz_boxed_fallback"), NULL) != DK_OK) {
        fprintf(stderr, "fuzz_boxed: setup failed: %s\n", dk_last_error());
        abort();
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Tensors                                                                                    */

typedef struct {
    fz_tensor f;
    bool used;
    bool malformed; /* a DLTensor the core must refuse */
    int64_t *arr;   /* an exact shape array for a malformed rank */
} fz_arg_tensor;

static DLDataType fz_any_dtype(fz_in *in)
{
    static const DLDataType d[] = {{kDLFloat, 32, 1}, {kDLFloat, 64, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1},
                                   {kDLInt, 64, 1},   {kDLInt, 32, 1},   {kDLUInt, 8, 1},   {kDLFloat, 32, 2},
                                   {kDLBool, 8, 1},   {kDLInt, 16, 1}};
    const uint8_t b = fz_u8(in);
    return d[b < 200 ? b % 7 : b % 10];
}

/* Plausible box rows: [K, 5] rois (a batch index, then corners) or [N, 4] boxes. */
FZ_HARNESS_LOOP static void fz_box_values(fz_tensor *f, fz_in *in)
{
    const int64_t n = f->shape[0], w = f->shape[1];
    for (int64_t k = 0; k < n; k++) {
        const int64_t j0 = w == 5;
        if (j0) fz_set(f, k * w, (double)(fz_u8(in) % 3));
        const double x = ((double)fz_u8(in) - 40.0) / 8.0, y = ((double)fz_u8(in) - 40.0) / 8.0;
        const double c[4] = {x, y, x + (double)fz_u8(in) / 16.0, y + (double)fz_u8(in) / 16.0};
        for (int64_t j = 0; j < 4 && j0 + j < w; j++) fz_set(f, k * w + j0 + j, c[j]);
    }
}

static void fz_make_tensor(fz_arg_tensor *a, const int64_t *pool, fz_in *in)
{
    memset(a, 0, sizeof *a);
    const uint8_t b = fz_u8(in);
    const int ndim = b < 240 ? b % 5 : (int)(b % 9);
    int64_t shape[FZ_MAX_NDIM];
    for (int d = 0; d < ndim; d++) shape[d] = pool[fz_pick(in, 8)];
    const DLDataType dt = fz_any_dtype(in);
    const bool repeats = fz_pick(in, 6) == 0;
    fz_tensor_init(&a->f, dt, ndim, shape, in, repeats);
    a->used = true;
    const uint8_t v = fz_u8(in);
    if ((v & 3) == 3 && ndim == 2 && (shape[1] == 4 || shape[1] == 5)) fz_box_values(&a->f, in);
    else fz_fill(&a->f, in);

    const uint8_t m = fz_u8(in);
    if (m < 232) return;
    dk_tensor *t = &a->f.t;
    switch (m % 8) {
    case 0: /* a device nothing serves here: its memory must never be touched */
        t->device.device_type = (m & 8) ? kDLCUDA : kDLExtDev;
        t->data = (void *)(uintptr_t)0xdead0000u;
        t->byte_offset = 0;
        return;
    case 1: { /* a rank past the bound, over an array holding only the real dimensions */
        a->arr = (int64_t *)malloc((size_t)(ndim ? ndim : 1) * sizeof(int64_t));
        if (!a->arr) abort();
        for (int d = 0; d < ndim; d++) a->arr[d] = a->f.shape[d];
        t->shape = a->arr;
        t->strides = NULL;
        static const int32_t bad[] = {DK_MAX_NDIM + 1, 1000, INT32_MAX, -1, INT32_MIN};
        t->ndim = bad[fz_pick(in, 5)];
        break;
    }
    case 2:
        if (ndim == 0) return;
        t->shape = NULL;
        break;
    case 3: t->dtype.lanes = 0; break;
    case 4: t->dtype.bits = 12; break;
    case 5: t->byte_offset = (uint64_t)INT64_MAX + 1 + fz_u8(in); break;
    case 6:
        if (ndim == 0 || fz_numel(&a->f) == 0 || a->f.shape[0] < 3) return;
        a->f.strides[0] = (int64_t)1 << 62; /* (3 - 1) * stride overflows */
        t->strides = a->f.strides;
        break;
    default:
        if (fz_numel(&a->f) == 0) return;
        t->data = NULL;
        t->byte_offset = 0;
        break;
    }
    a->malformed = true;
}

/* ------------------------------------------------------------------------------------------ */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_setup();
    fz_in all = {data, size};
    fz_in in = fz_chunk(&all, FZ_HEADER_BYTES);
    fz_tunables(&in);
    const int nops = dk_op_count();
    FZ_ASSERT(nops > 0, "no op registered");
    dk_op *op = dk_op_at(fz_pick(&in, nops));
    FZ_ASSERT(op && op->nargs <= DK_STACK_MAX - 4, "an op of %d with too many arguments for this harness", nops);

    /* The size pool shared by the stack's tensors. */
    int64_t pool[8] = {0, 0, 0, 0, 0, 1, 4, 5};
    for (int i = 0; i < 4; i++) pool[i] = fz_range(&in, 0, i < 3 ? 6 : 4);

    /* How many arguments the stack gets: usually all; a short stack has nothing below it, so
     * that no other value can stand in for a missing argument. */
    const uint8_t shape_of_stack = fz_u8(&in);
    const int short_nargs = fz_pick(&in, op->nargs + 1);
    const int nargs = (shape_of_stack & 0xf0) == 0xf0 ? short_nargs : op->nargs;
    bool must_fail = nargs < op->nargs;
    const int below_n = fz_pick(&in, 4);
    int64_t ilist[4] = {0, 0, 0, 1};
    ilist[0] = fz_int_arg(&in);
    ilist[1] = fz_int_arg(&in);

    dk_stack stack;
    dk_stack_init(&stack);
    fz_arg_tensor ts[DK_STACK_MAX];
    memset(ts, 0, sizeof ts);
    static const char *const strs[] = {"", "avg", "max", "a string no op expects"};

    /* Values below the op's arguments. */
    in = fz_chunk(&all, FZ_BELOW_BYTES);
    const int below = must_fail ? 0 : below_n;
    for (int i = 0; i < below; i++) {
        dk_value v = fz_bool(&in) ? dk_value_int(fz_int_arg(&in)) : dk_value_str(strs[fz_pick(&in, 4)]);
        FZ_ASSERT(dk_stack_push(&stack, v) == DK_OK, "pushing below");
    }
    dk_value below_copy[4];
    memcpy(below_copy, stack.v, (size_t)below * sizeof(dk_value));

    /* The arguments. */
    for (int i = 0; i < nargs; i++) {
        const dk_arg_info *a = &op->args[i];
        in = fz_chunk(&all, FZ_ARG_BYTES);
        const uint8_t c = fz_u8(&in);
        dk_value v;
        const bool wrong = c >= 240;
        const bool tensor_kind = a->kind == DK_ARG_TENSOR || a->kind == DK_ARG_OPT_TENSOR;
        if (wrong) {
            switch (c % 8) {
            case 0: v = dk_value_none(); break;
            case 1: v.tag = DK_TYPE_TENSOR, v.u.t = NULL; break;
            case 2: v = dk_value_str(NULL); break;
            case 3: v = dk_value_int(fz_int_arg(&in)); break;
            case 4: v = dk_value_float(fz_f64(&in)); break;
            case 5: v = dk_value_bool(true); break;
            case 6: v = dk_value_str(strs[fz_pick(&in, 4)]); break;
            default: v = dk_value_int_list((dk_int_list){ilist, 4}); break;
            }
            /* Which wrong values a boxed call takes anyway: an int for a float (widened), None or a
             * NULL tensor for an optional tensor, and the right tag by chance. */
            const bool taken = (a->kind == DK_ARG_FLOAT && v.tag == DK_TYPE_INT) ||
                               (a->kind == DK_ARG_OPT_TENSOR && (v.tag == DK_TYPE_NONE || v.tag == DK_TYPE_TENSOR)) ||
                               (a->kind == DK_ARG_INT && v.tag == DK_TYPE_INT) ||
                               (a->kind == DK_ARG_FLOAT && v.tag == DK_TYPE_FLOAT) ||
                               (a->kind == DK_ARG_BOOL && v.tag == DK_TYPE_BOOL) ||
                               (a->kind == DK_ARG_STR && v.tag == DK_TYPE_STR && v.u.s) ||
                               (a->kind == DK_ARG_INT_LIST && v.tag == DK_TYPE_INT_LIST);
            if (!taken) must_fail = true;
        } else if (tensor_kind) {
            if (a->kind == DK_ARG_OPT_TENSOR && (c & 3) == 0) {
                v = dk_value_none();
            } else {
                fz_make_tensor(&ts[i], pool, &in);
                ts[i].f.out = a->out;
                if (ts[i].malformed) must_fail = true;
                v = dk_value_tensor(&ts[i].f.t);
            }
        } else {
            switch (a->kind) {
            case DK_ARG_INT: v = dk_value_int(fz_int_arg(&in)); break;
            case DK_ARG_FLOAT: v = (c & 1) ? dk_value_int(fz_int_arg(&in)) : dk_value_float(fz_f64(&in)); break;
            case DK_ARG_BOOL: v = dk_value_bool(c & 1); break;
            case DK_ARG_STR: v = dk_value_str(strs[fz_pick(&in, 4)]); break;
            default: v = dk_value_int_list((dk_int_list){ilist, fz_pick(&in, 5)}); break;
            }
        }
        FZ_ASSERT(dk_stack_push(&stack, v) == DK_OK, "pushing argument %d", i);
    }

    /* Functionality keys on this thread for the call. */
    const dk_keyset keys = ((shape_of_stack & 1) ? DK_KEYSET(fz_key) : 0) |
                           ((shape_of_stack & 2) ? DK_KEYSET(DK_KEY_PROFILE) : 0);
    const dk_tls_state prev = dk_tls_push_include(keys);
    fz_tensor *verify[DK_STACK_MAX];
    for (int i = 0; i < DK_STACK_MAX; i++) verify[i] = ts[i].used ? &ts[i].f : NULL;
    fz_snapshot(verify, DK_STACK_MAX);
    const int size_before = stack.size;
    dk_clear_error();
    const dk_status st = dk_op_call_boxed(op, &stack);
    dk_tls_pop(prev);

    static int trace = -1; /* FZ_TRACE=1: one line per call, to see what a corpus reaches */
    if (trace < 0) trace = getenv("FZ_TRACE") != NULL;
    if (trace) fprintf(stderr, "fuzz_boxed: %s: %s %s\n", op->name, dk_status_name(st), st ? dk_last_error() : "");
    fz_verify(op->name, st, verify, DK_STACK_MAX);
    FZ_ASSERT(!must_fail || st != DK_OK,
              "%s: a boxed call with a malformed tensor, a missing argument or a wrong tag "
              "succeeded",
              op->name);
    FZ_ASSERT(stack.size == (size_before >= op->nargs ? size_before - op->nargs : size_before),
              "%s: the stack went from %d to %d values (%d arguments)", op->name, size_before, stack.size, op->nargs);
    if (size_before >= op->nargs) {
        const int kept = size_before - op->nargs < below ? size_before - op->nargs : below;
        FZ_ASSERT(memcmp(stack.v, below_copy, (size_t)kept * sizeof(dk_value)) == 0,
                  "%s: a value below the arguments changed", op->name);
    }
    for (int i = 0; i < DK_STACK_MAX; i++)
        if (ts[i].used) {
            free(ts[i].arr);
            fz_tensor_free(&ts[i].f);
        }
    return 0;
}

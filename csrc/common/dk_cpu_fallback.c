/* dk_cpu_fallback.c — the core's CPU fallback (Note [The CPU fallback] in dk_cpu_fallback.h). */
#include "dk_cpu_fallback.h"

#include <stdlib.h>
#include <string.h>

#include "dk_backend.h"
#include "dk_boxed.h"
#include "dk_op_private.h"
#include "dk_tensor.h"
#include "dk_tls.h"

#define DK__LINE ((size_t)64)

/* Ops warned about, one bit per op index (as Profile keys its rows: dk__op_index). */
#define DK__WARN_WORDS 1024
static uint64_t dk__warned[DK__WARN_WORDS];

static void dk__warn_once(const dk_op *op, DLDevice device)
{
    const int i = dk__op_index(op);
    if (i >= 0 && i < DK__WARN_WORDS * 64) {
        const uint64_t bit = (uint64_t)1 << (i % 64);
        if (__atomic_fetch_or(&dk__warned[i / 64], bit, __ATOMIC_RELAXED) & bit) return;
    }
    char dev[64];
    dk_warn("%s has no kernel for %s: it runs on the CPU through copies (the CPU fallback; said once per op)", op->name,
            dk_device_str(device, dev, sizeof dev));
}

/* One tensor argument on the device: its byte span [lo, hi) in device memory and its region. */
typedef struct {
    int arg;
    uintptr_t lo, hi;
    int region;
} dk__span;

typedef struct {
    uintptr_t lo, hi;
    char *host;
    bool written; /* holds an argument the op writes */
} dk__region;

/* The bytes a tensor's elements occupy, from its first-addressed to past its last element. */
static void dk__span_of(const dk_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    const int64_t es = (int64_t)((t->dtype.bits * t->dtype.lanes + 7) / 8);
    int64_t first = 0, last = 0;
    for (int d = 0; d < t->ndim; d++) {
        const int64_t s = dk_tensor_stride(t, d), extent = (t->shape[d] - 1) * s;
        if (extent < 0) first += extent;
        else last += extent;
    }
    const uintptr_t base = (uintptr_t)dk_tensor_data(t);
    *lo = base + (uintptr_t)(first * es);
    *hi = base + (uintptr_t)((last + 1) * es);
}

static dk_status dk__cpu_copy(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    (void)ks;
    (void)ctx;
    const dk_value *args = dk_stack_args(stack, op);
    DLDevice device = {kDLCPU, 0};
    for (int i = 0; i < op->nargs && device.device_type == kDLCPU; i++)
        if (args[i].tag == DK_TYPE_TENSOR && args[i].u.t->device.device_type != kDLCPU) device = args[i].u.t->device;
    const dk_backend *b = dk_backend_of_device(device);
    char dev[64];
    if (!b || !b->copy)
        return dk_error(DK_ENOTIMPL,
                        "%s: no kernel for %s, and the CPU fallback needs its backend's copy function (%s)", op->name,
                        dk_device_str(device, dev, sizeof dev),
                        b ? "its backend object has none" : "no backend object is registered for it");
    dk__warn_once(op, device);

    dk__span spans[DK_STACK_MAX];
    dk__region regions[DK_STACK_MAX];
    dk_tensor host[DK_STACK_MAX];
    int nspans = 0, nregions = 0;
    for (int i = 0; i < op->nargs; i++) {
        if (args[i].tag != DK_TYPE_TENSOR) continue;
        const dk_tensor *t = args[i].u.t;
        if (t->device.device_type == kDLCPU) continue;
        if (t->device.device_type != device.device_type || t->device.device_id != device.device_id)
            return dk_error(DK_EINVAL, "%s: parameter '%s' is on %s, another argument on %s", op->name,
                            op->args[i].name, dk_device_str(t->device, dev, sizeof dev),
                            dk_device_str(device, (char[64]){0}, 64));
        if (dk_tensor_numel(t) == 0) continue; /* passed with no memory below */
        dk__span s = {i, 0, 0, -1};
        dk__span_of(t, &s.lo, &s.hi);
        int j = nspans++; /* insertion by lo: at most DK_STACK_MAX spans */
        while (j > 0 && spans[j - 1].lo > s.lo) {
            spans[j] = spans[j - 1];
            j--;
        }
        spans[j] = s;
    }
    size_t total = 0;
    for (int j = 0; j < nspans; j++) {
        if (nregions == 0 || spans[j].lo >= regions[nregions - 1].hi)
            regions[nregions++] = (dk__region){spans[j].lo, spans[j].hi, NULL, false};
        else if (spans[j].hi > regions[nregions - 1].hi) regions[nregions - 1].hi = spans[j].hi;
        spans[j].region = nregions - 1;
        regions[nregions - 1].written |= op->args[spans[j].arg].out;
    }
    /* Each region's host copy starts at the device address's offset within a 64-byte line, so
     * every tensor in it keeps its alignment (an int64 output after 12 bytes of float scores
     * must not land on a 4-byte boundary), whatever the regions before it measured. */
    size_t at[DK_STACK_MAX];
    for (int r = 0; r < nregions; r++) {
        at[r] = (total + DK__LINE - 1) / DK__LINE * DK__LINE + regions[r].lo % DK__LINE;
        total = at[r] + (regions[r].hi - regions[r].lo);
    }

    char *buffer = NULL;
    if (total && posix_memalign((void **)&buffer, DK__LINE, total) != 0) buffer = NULL;
    if (total && !buffer)
        return dk_error(DK_ENOMEM, "%s: the CPU fallback cannot allocate %zu bytes of host memory", op->name, total);
    dk_device_guard guard;
    dk_status st = dk_device_guard_enter(&guard, device);
    if (st != DK_OK) {
        free(buffer);
        return st;
    }
    void *stream = dk_current_stream(device);
    for (int r = 0; r < nregions && st == DK_OK; r++) {
        regions[r].host = buffer + at[r];
        st = b->copy(b->ctx, device.device_id, regions[r].host, (const void *)regions[r].lo,
                     regions[r].hi - regions[r].lo, DK_COPY_DEVICE_TO_HOST, stream);
    }
    if (st == DK_OK && b->synchronize) st = b->synchronize(b->ctx, device.device_id, stream);

    dk_stack inner;
    dk_stack_init(&inner);
    for (int i = 0; i < op->nargs && st == DK_OK; i++) {
        dk_value v = args[i];
        if (v.tag == DK_TYPE_TENSOR && v.u.t->device.device_type != kDLCPU) {
            host[i] = *v.u.t;
            host[i].device = (DLDevice){kDLCPU, 0};
            host[i].byte_offset = 0;
            host[i].data = NULL; /* no element: no memory */
            for (int j = 0; j < nspans; j++)
                if (spans[j].arg == i) {
                    const dk__region *g = &regions[spans[j].region];
                    host[i].data = g->host + ((uintptr_t)dk_tensor_data(v.u.t) - g->lo);
                }
            v = dk_value_tensor(&host[i]);
        }
        st = dk_stack_push(&inner, v);
    }
    if (st == DK_OK) {
        dk_tls_state saved = dk_tls_push_exclude(~DK_KEYSET(DK_KEY_CPU));
        st = dk_op_call_boxed(op, &inner);
        dk_tls_pop(saved);
    }
    /* The op's own error stays the one reported; the copies back run only after success. */
    for (int r = 0; r < nregions && st == DK_OK; r++)
        if (regions[r].written)
            st = b->copy(b->ctx, device.device_id, (void *)regions[r].lo, regions[r].host,
                         regions[r].hi - regions[r].lo, DK_COPY_HOST_TO_DEVICE, stream);
    if (st == DK_OK && nregions && b->synchronize) st = b->synchronize(b->ctx, device.device_id, stream);
    dk_device_guard_exit(&guard);
    free(buffer);
    return st;
}

dk_status dk_register_cpu_fallback(dk_key key, dk_handle *out)
{
    if (!dk_key_is_backend(key) || key == DK_KEY_CPU)
        return dk_error(DK_EINVAL, "dk_register_cpu_fallback: key %d (%s) is not a backend key other than the CPU's",
                        (int)key, dk_key_name(key));
    dk_kernel k = dk_kernel_boxed(dk__cpu_copy, NULL, "dk_cpu_fallback");
    k.flags |= DK__KERNEL_CPU_COPY;
    return dk_register_fallback(key, k, out);
}

/*
 * dk_dispatcher.c — registrations, computed tables, and the dispatcher's slow paths.
 *
 * The fast path (key collection, the seqlock read of one slot, the call) is inlined into every
 * op's generated entry (dk_op.h). Everything here runs either under the registry lock
 * (registration, table computation) or only on errors, tracing and boxed calls.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dk_internal.h"
#include "dk_op.h"

/* ------------------------------------------------------------------------------------------ */
/* State                                                                                      */

enum { DK__REG_KERNEL, DK__REG_COMPOSITE, DK__REG_FALLBACK };

struct dk__registration {
    struct dk__registration *below; /* the registration this one shadows in its stack */
    struct dk__registration *all_prev, *all_next; /* every live registration, for handle checks */
    dk_op *op;                      /* NULL for fallbacks */
    int kind;
    dk_key key;                     /* unused for composites */
    dk_kernel kernel;
    char name[];                    /* the kernel's name, owned */
};

struct dk__op_private {
    struct dk__registration *kernels[DK_NUM_KEYS]; /* stack tops, newest first */
    struct dk__registration *composite;
    dk_provenance prov[DK_NUM_KEYS];
    const char *slot_name[DK_NUM_KEYS];
    char *schema;
    uint64_t prof_count[DK_NUM_KEYS];
    uint64_t prof_ns[DK_NUM_KEYS];
};

static pthread_mutex_t dk__mutex;
static pthread_once_t dk__mutex_once = PTHREAD_ONCE_INIT;

static struct dk__registration *dk__fallbacks[DK_NUM_KEYS];
static struct dk__registration *dk__all_regs;
static dk_op **dk__ops;
static int dk__nops, dk__capops;

int dk__trace_enabled;

static void dk__mutex_init(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&dk__mutex, &a);
    pthread_mutexattr_destroy(&a);
}

void dk__lock(void)
{
    pthread_once(&dk__mutex_once, dk__mutex_init);
    pthread_mutex_lock(&dk__mutex);
}

void dk__unlock(void) { pthread_mutex_unlock(&dk__mutex); }

/* ------------------------------------------------------------------------------------------ */
/* Table computation (lock held)                                                              */

/* Note [Slot precedence]
 * A slot is filled from the first that exists of: the op's newest kernel at this key; the op's
 * composite (backend keys only: a composite is device-generic code and must not swallow a
 * functionality key); the key's newest fallback; nothing. A fallthrough at the kernel or the
 * fallback level resolves the slot to "fallthrough", which drops the key from the op's mask so
 * dispatch goes straight to the next key. */
static void dk__resolve(const dk_op *op, dk_key k, dk_slot *slot, dk_provenance *prov,
                        const char **name)
{
    const struct dk__op_private *p = op->priv;
    const struct dk__registration *r = NULL;
    memset(slot, 0, sizeof *slot);
    *prov = DK_PROV_MISSING;
    *name = NULL;
    if (k == DK_KEY_UNDEFINED) return;
    if (p->kernels[k]) {
        r = p->kernels[k];
        *prov = DK_PROV_KERNEL;
    } else if (dk_key_is_backend(k) && dk__key_names[k] && p->composite) {
        /* Claimed backends only: an unclaimed vendor slot serves no device, and claiming one
         * recomputes every table. */
        r = p->composite;
        *prov = DK_PROV_COMPOSITE;
    } else if (dk__fallbacks[k]) {
        r = dk__fallbacks[k];
        *prov = DK_PROV_FALLBACK;
    }
    if (!r) return;
    *name = r->name;
    if (r->kernel.flags & DK_KERNEL_FALLTHROUGH) {
        *prov = DK_PROV_FALLTHROUGH;
        return;
    }
    slot->unboxed = r->kernel.unboxed;
    /* With tracing on, the fast path finds nothing and every call goes the traced slow way. */
    slot->fast = dk__trace_on() ? NULL : r->kernel.unboxed;
    slot->boxed = r->kernel.unboxed ? NULL : r->kernel.boxed;
    slot->ctx = r->kernel.ctx;
}

static void dk__op_recompute_locked(dk_op *op)
{
    dk_slot slots[DK_NUM_KEYS];
    dk_keyset mask = 0;
    for (dk_key k = 0; k < DK_NUM_KEYS; k++) {
        dk__resolve(op, k, &slots[k], &op->priv->prov[k], &op->priv->slot_name[k]);
        if (k != DK_KEY_UNDEFINED && op->priv->prov[k] != DK_PROV_FALLTHROUGH) mask |= DK_KEYSET(k);
    }
    /* Seqlock write: odd while the table is inconsistent (Note [Lock-free table reads]). */
    uint32_t s = __atomic_load_n(&op->seq, __ATOMIC_RELAXED);
    __atomic_store_n(&op->seq, s + 1, __ATOMIC_RELAXED);
    /* Release stores rather than a release fence: the same ordering (a reader whose acquire load
     * sees any new value also sees seq odd), and -fsanitize=thread, which does not support
     * fences, understands them. Registration is rare; the cost does not matter. */
    for (dk_key k = 0; k < DK_NUM_KEYS; k++) {
        __atomic_store_n(&op->table[k].fast, slots[k].fast, __ATOMIC_RELEASE);
        __atomic_store_n(&op->table[k].unboxed, slots[k].unboxed, __ATOMIC_RELEASE);
        __atomic_store_n(&op->table[k].boxed, slots[k].boxed, __ATOMIC_RELEASE);
        __atomic_store_n(&op->table[k].ctx, slots[k].ctx, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&op->mask, mask, __ATOMIC_RELEASE);
    __atomic_store_n(&op->seq, s + 2, __ATOMIC_RELEASE);
}

void dk__recompute_all_locked(void)
{
    for (int i = 0; i < dk__nops; i++) dk__op_recompute_locked(dk__ops[i]);
}

/* Gives the op its private part and a place in the op list. Idempotent. Lock held. */
/*
 * Note [Core init without constructors]
 * The core's own registrations (the Profile fallback, the built-in cpu backend's entry) run on
 * the first op or registration rather than from constructors in their own files: a static link
 * of libdkit.a keeps only the archive members something references, and the dispatcher always
 * is one, so this way a plain static link still gets a complete core. Lock held.
 */
static void dk__core_init_locked(void)
{
    static bool done;
    if (done) return;
    done = true;
    dk__backend_note_builtin("cpu");
    dk__profile_install();
}

/* An op made by hand (dk_op is public) must still be callable by every layer: the binding,
 * the boxed path and the dumps all index args[] and name things. */
static dk_status dk__op_validate(const dk_op *op)
{
    if (!op->name || !op->name[0]) return dk_error(DK_EINVAL, "an op has no name");
    if (op->nargs < 0 || op->nargs > DK_STACK_MAX || (op->nargs && !op->args))
        return dk_error(DK_EINVAL, "%s: %d arguments (at most %d)", op->name, op->nargs, DK_STACK_MAX);
    if (!op->unbox || !op->entry || !op->error_stub)
        return dk_error(DK_EINVAL, "%s: define ops with DK_DEFINE_OP (generated functions missing)", op->name);
    for (int i = 0; i < op->nargs; i++)
        if (!op->args[i].name || !op->args[i].name[0])
            return dk_error(DK_EINVAL, "%s: argument %d has no name", op->name, i);
    return DK_OK;
}

static dk_status dk__op_ensure_locked(dk_op *op)
{
    dk__core_init_locked();
    if (op->priv) return DK_OK;
    dk_status st = dk__op_validate(op);
    if (st) return st;
    if (dk__nops == dk__capops) {
        int cap = dk__capops ? 2 * dk__capops : 32;
        dk_op **ops = realloc(dk__ops, (size_t)cap * sizeof *ops);
        if (!ops) return dk_error(DK_ENOMEM, "%s: out of memory registering the op", op->name);
        dk__ops = ops;
        dk__capops = cap;
    }
    struct dk__op_private *p = calloc(1, sizeof *p);
    if (!p) return dk_error(DK_ENOMEM, "%s: out of memory registering the op", op->name);
    op->priv = p;
    dk__ops[dk__nops++] = op;
    dk__op_recompute_locked(op);
    return DK_OK;
}

void dk__op_announce(dk_op *op)
{
    dk__lock();
    if (dk__op_ensure_locked(op) != DK_OK) dk_warn("%s", dk_last_error());
    dk__unlock();
}

/* ------------------------------------------------------------------------------------------ */
/* Registration                                                                               */

static struct dk__registration **dk__stack_of(dk_op *op, int kind, dk_key key)
{
    switch (kind) {
    case DK__REG_KERNEL: return &op->priv->kernels[key];
    case DK__REG_COMPOSITE: return &op->priv->composite;
    default: return &dk__fallbacks[key];
    }
}

static const char *dk__where(int kind)
{
    return kind == DK__REG_COMPOSITE ? "composite" : kind == DK__REG_FALLBACK ? "fallback" : "kernel";
}

static dk_status dk__register(dk_op *op, int kind, dk_key key, dk_kernel k, dk_handle *out)
{
    const char *who = op ? op->name : "dk_register_fallback";
    bool fallthrough = (k.flags & DK_KERNEL_FALLTHROUGH) != 0;
    if (kind != DK__REG_COMPOSITE && (key <= DK_KEY_UNDEFINED || key >= DK_NUM_KEYS))
        return dk_error(DK_EINVAL, "%s: dispatch key %d is out of range [1, %d)", who, key, DK_NUM_KEYS);
    if (!fallthrough && !k.unboxed && !k.boxed)
        return dk_error(DK_EINVAL, "%s: a kernel needs a typed or a boxed function", who);
    if (kind == DK__REG_FALLBACK && !fallthrough && !k.boxed)
        return dk_error(DK_EINVAL, "fallback at %s: fallbacks serve every op and must be boxed",
                        dk_key_name(key));
    if (kind == DK__REG_COMPOSITE && fallthrough)
        return dk_error(DK_EINVAL, "%s: a composite cannot be a fallthrough", who);

    const char *name = k.name ? k.name : "(unnamed)";
    size_t len = strlen(name);
    struct dk__registration *r = malloc(sizeof *r + len + 1);
    if (!r) return dk_error(DK_ENOMEM, "%s: out of memory registering a kernel", who);
    memcpy(r->name, name, len + 1);
    r->op = op;
    r->kind = kind;
    r->key = kind == DK__REG_COMPOSITE ? DK_KEY_UNDEFINED : key;
    r->kernel = k;
    r->kernel.name = r->name;

    dk__lock();
    dk__core_init_locked();
    dk_status st = op ? dk__op_ensure_locked(op) : DK_OK;
    if (st) {
        dk__unlock();
        free(r);
        return st;
    }
    struct dk__registration **top = dk__stack_of(op, kind, key);
    if (*top) {
        if (op)
            dk_warn("%s: %s '%s' at %s overrides '%s'", op->name, dk__where(kind), r->name,
                    kind == DK__REG_COMPOSITE ? "all backends" : dk_key_name(key), (*top)->name);
        else
            dk_warn("fallback '%s' at %s overrides '%s'", r->name, dk_key_name(key), (*top)->name);
    }
    r->below = *top;
    *top = r;
    r->all_prev = NULL;
    r->all_next = dk__all_regs;
    if (dk__all_regs) dk__all_regs->all_prev = r;
    dk__all_regs = r;
    if (op)
        dk__op_recompute_locked(op);
    else
        dk__recompute_all_locked();
    dk__unlock();
    if (out) *out = r;
    return DK_OK;
}

dk_status dk_op_register(dk_op *op, dk_key key, dk_kernel k, dk_handle *out)
{
    if (!op) return dk_error(DK_EINVAL, "dk_op_register: op is NULL");
    return dk__register(op, DK__REG_KERNEL, key, k, out);
}

dk_status dk_op_register_composite(dk_op *op, dk_kernel k, dk_handle *out)
{
    if (!op) return dk_error(DK_EINVAL, "dk_op_register_composite: op is NULL");
    return dk__register(op, DK__REG_COMPOSITE, DK_KEY_UNDEFINED, k, out);
}

dk_status dk_register_fallback(dk_key key, dk_kernel k, dk_handle *out)
{
    return dk__register(NULL, DK__REG_FALLBACK, key, k, out);
}

dk_status dk_unregister(dk_handle h)
{
    dk__lock();
    /* Find the handle among live registrations before touching it: a stale or double-released
     * handle must be an error, not a use after free. */
    struct dk__registration *r = dk__all_regs;
    while (r && r != h) r = r->all_next;
    if (!r) {
        dk__unlock();
        return dk_error(DK_EINVAL, "dk_unregister: unknown or already released handle");
    }
    struct dk__registration **link = dk__stack_of(r->op, r->kind, r->key);
    while (*link != r) link = &(*link)->below;
    *link = r->below;
    if (r->all_prev) r->all_prev->all_next = r->all_next;
    else dk__all_regs = r->all_next;
    if (r->all_next) r->all_next->all_prev = r->all_prev;
    if (r->op)
        dk__op_recompute_locked(r->op);
    else
        dk__recompute_all_locked();
    dk__unlock();
    free(r);
    return DK_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Introspection                                                                              */

const char *dk_provenance_name(dk_provenance p)
{
    static const char *const names[] = {"missing", "kernel", "composite", "fallback", "fallthrough"};
    return (unsigned)p < DK_COUNTOF(names) ? names[p] : "?";
}

/* A key appears in dumps when it is claimed or has anything registered for this op. */
static bool dk__key_shown(const dk_op *op, dk_key k)
{
    return k != DK_KEY_UNDEFINED && (dk__key_names[k] || op->priv->prov[k] != DK_PROV_MISSING);
}

int dk_op_table(const dk_op *op, dk_table_entry *out, int max)
{
    int n = 0;
    if (!op) return 0;
    if (!out) max = 0;
    dk__lock();
    if (!op->priv) {
        dk__unlock();
        return 0;
    }
    for (dk_key k = DK_NUM_KEYS - 1; k > DK_KEY_UNDEFINED; k--) {
        if (!dk__key_shown(op, k)) continue;
        if (n < max) {
            dk_table_entry *e = &out[n];
            e->key = k;
            e->provenance = op->priv->prov[k];
            e->kernel_name = op->priv->slot_name[k];
            e->boxed = op->table[k].unboxed == NULL && op->table[k].boxed != NULL;
        }
        n++;
    }
    dk__unlock();
    return n;
}

void dk_free(void *p) { free(p); }

/* A growable string for dumps; on allocation failure it stops growing and reports NULL. */
typedef struct {
    char *s;
    size_t len, cap;
    bool failed;
} dk__buf;

static void dk__buf_printf(dk__buf *b, const char *fmt, ...) DK_PRINTF(2, 3);
static void dk__buf_printf(dk__buf *b, const char *fmt, ...)
{
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap ? b->cap : 256);
        while (cap <= b->len + (size_t)n) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

static char *dk__buf_finish(dk__buf *b)
{
    if (b->failed) {
        free(b->s);
        dk_error(DK_ENOMEM, "out of memory formatting text");
        return NULL;
    }
    if (!b->s) dk__buf_printf(b, "%s", "");
    return b->failed ? NULL : b->s;
}

char *dk_op_dump(const dk_op *op)
{
    if (!op) {
        dk_error(DK_EINVAL, "dk_op_dump: op is NULL");
        return NULL;
    }
    dk_table_entry e[DK_NUM_KEYS];
    int n = dk_op_table(op, e, DK_NUM_KEYS);
    dk__buf b = {0};
    dk__buf_printf(&b, "%s\n", dk_op_schema(op));
    dk__buf_printf(&b, "  %-12s %-12s %s\n", "key", "provenance", "kernel");
    for (int i = 0; i < n && i < DK_NUM_KEYS; i++) {
        dk__buf_printf(&b, "  %-12s %-12s %s%s\n", dk_key_name(e[i].key),
                       dk_provenance_name(e[i].provenance),
                       e[i].kernel_name && e[i].provenance != DK_PROV_FALLTHROUGH ? e[i].kernel_name : "-",
                       e[i].boxed ? " (boxed)" : "");
    }
    return dk__buf_finish(&b);
}

const char *dk_arg_kind_name(dk_arg_kind k)
{
    switch (k) {
    case DK_ARG_TENSOR: return "Tensor";
    case DK_ARG_OPT_TENSOR: return "Tensor?";
    case DK_ARG_INT: return "int";
    case DK_ARG_FLOAT: return "float";
    case DK_ARG_BOOL: return "bool";
    case DK_ARG_STR: return "str";
    case DK_ARG_INT_LIST: return "int[]";
    }
    return "?";
}

/* PyTorch's schema syntax: written tensors carry an alias set and '!', e.g. Tensor(a!) out,
 * optional ones a trailing '?', e.g. Tensor(b!)? argmax. */
static char *dk__format_schema(const dk_op *op)
{
    dk__buf b = {0};
    char alias = 'a';
    dk__buf_printf(&b, "dkit::%s(", op->name);
    for (int i = 0; i < op->nargs; i++) {
        const dk_arg_info *a = &op->args[i];
        const char *sep = i ? ", " : "";
        bool tensor = a->kind == DK_ARG_TENSOR || a->kind == DK_ARG_OPT_TENSOR;
        if (tensor && a->out)
            dk__buf_printf(&b, "%sTensor(%c!)%s %s", sep, alias++,
                           a->kind == DK_ARG_OPT_TENSOR ? "?" : "", a->name);
        else
            dk__buf_printf(&b, "%s%s %s", sep, dk_arg_kind_name(a->kind), a->name);
    }
    dk__buf_printf(&b, ") -> ()");
    return dk__buf_finish(&b);
}

const char *dk_op_schema(const dk_op *op)
{
    const char *s;
    if (!op) return "";
    dk__lock();
    if (dk__op_ensure_locked((dk_op *)op) != DK_OK) {
        dk__unlock();
        return op->name ? op->name : "";
    }
    if (!op->priv->schema) op->priv->schema = dk__format_schema(op);
    s = op->priv->schema ? op->priv->schema : op->name;
    dk__unlock();
    return s;
}

dk_op *dk_op_find(const char *name)
{
    dk_op *found = NULL;
    if (!name) return NULL;
    dk__lock();
    for (int i = 0; i < dk__nops && !found; i++)
        if (strcmp(dk__ops[i]->name, name) == 0) found = dk__ops[i];
    dk__unlock();
    return found;
}

int dk_op_count(void)
{
    dk__lock();
    int n = dk__nops;
    dk__unlock();
    return n;
}

dk_op *dk_op_at(int i)
{
    dk__lock();
    dk_op *op = (i >= 0 && i < dk__nops) ? dk__ops[i] : NULL;
    dk__unlock();
    return op;
}

/* ------------------------------------------------------------------------------------------ */
/* Errors and tracing                                                                         */

/* "cpu, cuda": the keys at which this op has something to run. */
static void dk__registered_keys(const dk_op *op, bool backends_only, bool kernels_only, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    if (op->priv) {
        for (dk_key k = 1; k < DK_NUM_KEYS && used < n; k++) {
            dk_provenance p = op->priv->prov[k];
            if (p == DK_PROV_MISSING || p == DK_PROV_FALLTHROUGH) continue;
            if (backends_only && !dk_key_is_backend(k)) continue;
            if (kernels_only && p != DK_PROV_KERNEL && p != DK_PROV_COMPOSITE) continue;
            used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "", dk_key_name(k));
        }
    }
    if (!buf[0]) snprintf(buf, n, "none");
}

dk_status dk__op_no_kernel(const dk_op *op, dk_keyset ks)
{
    char have[512], keys[256];
    dk__lock();
    dk_keyset m = ks & op->mask;
    dk_key k = dk_keyset_highest(m);
    dk__registered_keys(op, false, true, have, sizeof have);
    dk__unlock();
    if (k == DK_KEY_UNDEFINED)
        return dk_error(DK_ENOTIMPL, "%s: no dispatch key left for this call (keys %s; registered: %s)",
                        op->name, dk_keyset_str(ks, keys, sizeof keys), have);
    return dk_error(DK_ENOTIMPL, "%s: no kernel for %s %s (registered: %s)", op->name,
                    dk_key_is_backend(k) ? "device" : "key", dk_key_name(k), have);
}

dk_status dk__op_device_error(const dk_op *op, const dk__device_check *dc)
{
    char a[64], b[64];
    dk_device_str(dc->bad->device, a, sizeof a);
    if (dk__key_of_device_type((int32_t)dc->bad->device.device_type) == DK_KEY_UNDEFINED)
        return dk_error(DK_EINVAL, "%s: parameter '%s' is on %s, which no loaded dkit backend serves",
                        op->name, dc->bad_name, a);
    dk_device_str(dc->first->device, b, sizeof b);
    return dk_error(DK_EINVAL, "%s: parameter '%s' is on %s but '%s' is on %s", op->name,
                    dc->bad_name, a, dc->first_name, b);
}

dk_status dk__op_null_tensor(const dk_op *op, const char *name)
{
    return dk_error(DK_ETYPE, "%s: parameter '%s' is a required tensor but got none", op->name, name);
}

void dk_dispatch_set_trace(bool on)
{
    dk__lock();
    __atomic_store_n(&dk__trace_enabled, on ? 1 : 0, __ATOMIC_RELAXED);
    dk__recompute_all_locked(); /* the fast entries (dk_slot.fast) depend on the flag */
    dk__unlock();
}

void dk__op_trace(const dk_op *op, dk_keyset ks, dk_key k)
{
    char keys[256], name[128] = "-";
    const char *prov = "missing";
    dk__lock();
    if (op->priv && k != DK_KEY_UNDEFINED) {
        prov = dk_provenance_name(op->priv->prov[k]);
        /* Copied under the lock: another thread may release that registration (and free its
         * name) as soon as we unlock. */
        if (op->priv->slot_name[k]) snprintf(name, sizeof name, "%s", op->priv->slot_name[k]);
    }
    dk__unlock();
    fprintf(stderr, "[dkit dispatch] %s keys=%s -> %s (%s %s)\n", op->name,
            dk_keyset_str(ks, keys, sizeof keys), dk_key_name(k), prov, name);
}

/* getenv at load: tracing costs one predictable branch per call when off. */
DK__CONSTRUCTOR(dk__trace_from_env)
{
    const char *v = getenv("DKIT_DISPATCH_TRACE");
    if (v && v[0] && strcmp(v, "0") != 0) dk_dispatch_set_trace(true);
}

/* ------------------------------------------------------------------------------------------ */
/* Boxed calls                                                                                */

dk_status dk_stack_push(dk_stack *s, dk_value v)
{
    if (!s) return dk_error(DK_EINVAL, "dk_stack_push: stack is NULL");
    if (s->size >= DK_STACK_MAX) return dk_error(DK_EINVAL, "dkit stack overflow (%d values)", DK_STACK_MAX);
    s->v[s->size++] = v;
    return DK_OK;
}

static const char *dk__tag_name(dk_type t)
{
    switch (t) {
    case DK_TYPE_NONE: return "None";
    case DK_TYPE_TENSOR: return "Tensor";
    case DK_TYPE_INT: return "int";
    case DK_TYPE_FLOAT: return "float";
    case DK_TYPE_BOOL: return "bool";
    case DK_TYPE_STR: return "str";
    case DK_TYPE_INT_LIST: return "int[]";
    }
    return "?";
}

/* Checks tags against the schema; widens int to float in place (as Python would). */
static dk_status dk__check_args(const dk_op *op, dk_value *v)
{
    for (int i = 0; i < op->nargs; i++) {
        const dk_arg_info *a = &op->args[i];
        dk_type want = DK_TYPE_NONE;
        switch (a->kind) {
        case DK_ARG_TENSOR: want = DK_TYPE_TENSOR; break;
        case DK_ARG_OPT_TENSOR:
            if (v[i].tag == DK_TYPE_NONE || (v[i].tag == DK_TYPE_TENSOR && v[i].u.t)) continue;
            want = DK_TYPE_TENSOR;
            break;
        case DK_ARG_INT: want = DK_TYPE_INT; break;
        case DK_ARG_FLOAT:
            if (v[i].tag == DK_TYPE_INT) {
                v[i] = dk_value_float((double)v[i].u.i);
                continue;
            }
            want = DK_TYPE_FLOAT;
            break;
        case DK_ARG_BOOL: want = DK_TYPE_BOOL; break;
        case DK_ARG_STR: want = DK_TYPE_STR; break;
        case DK_ARG_INT_LIST: want = DK_TYPE_INT_LIST; break;
        }
        if (v[i].tag != want || (want == DK_TYPE_TENSOR && !v[i].u.t) ||
            (want == DK_TYPE_STR && !v[i].u.s))
            return dk_error(DK_ETYPE, "%s: argument '%s' expects %s, got %s", op->name, a->name,
                            dk_arg_kind_name(a->kind),
                            (v[i].tag == DK_TYPE_TENSOR && !v[i].u.t) || (v[i].tag == DK_TYPE_STR && !v[i].u.s)
                                ? "None"
                                : dk__tag_name(v[i].tag));
    }
    return DK_OK;
}

dk_status dk_op_call_boxed(const dk_op *op, dk_stack *stack)
{
    if (!op || !stack) return dk_error(DK_EINVAL, "dk_op_call_boxed: %s is NULL", op ? "stack" : "op");
    if (stack->size < op->nargs)
        return dk_error(DK_ETYPE, "%s: expects %d arguments, the stack holds %d", op->name, op->nargs,
                        stack->size);
    dk_value *args = dk_stack_args(stack, op);
    dk_status st = dk__check_args(op, args);
    if (st == DK_OK) st = op->unbox(op->entry, args);
    stack->size -= op->nargs;
    return st;
}

dk_status dk_op_redispatch_boxed(const dk_op *op, dk_keyset ks, dk_stack *stack)
{
    dk_keyset below = dk_keyset_below(ks, dk_keyset_highest(ks));
    dk_slot slot;
    dk_keyset m;
    dk_key k = dk__op_select(op, below, &slot, &m);
    if (DK_UNLIKELY(dk__trace_on())) dk__op_trace(op, below, k);
    if (slot.unboxed) return op->unbox(slot.unboxed, dk_stack_args(stack, op));
    if (slot.boxed) return slot.boxed(op, m, stack, slot.ctx);
    return dk__op_no_kernel(op, below);
}

/* ------------------------------------------------------------------------------------------ */
/* Profile counters (kept with the op so adding a row never allocates on the hot path)        */

void dk__profile_add(const dk_op *op, dk_key backend, uint64_t ns)
{
    if (!op->priv || backend < 0 || backend >= DK_NUM_KEYS) return;
    __atomic_fetch_add(&op->priv->prof_count[backend], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&op->priv->prof_ns[backend], ns, __ATOMIC_RELAXED);
}

void dk__profile_read(const dk_op *op, dk_key backend, uint64_t *count, uint64_t *ns)
{
    *count = *ns = 0;
    if (!op->priv || backend < 0 || backend >= DK_NUM_KEYS) return;
    *count = __atomic_load_n(&op->priv->prof_count[backend], __ATOMIC_RELAXED);
    *ns = __atomic_load_n(&op->priv->prof_ns[backend], __ATOMIC_RELAXED);
}

void dk__profile_clear(const dk_op *op)
{
    if (!op->priv) return;
    for (dk_key k = 0; k < DK_NUM_KEYS; k++) {
        __atomic_store_n(&op->priv->prof_count[k], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&op->priv->prof_ns[k], 0, __ATOMIC_RELAXED);
    }
}

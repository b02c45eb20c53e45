/*
 * dk_dispatcher.c — the dispatcher's state: the op list, registrations, and each op's computed
 * table.
 *
 * The fast path (key collection, the seqlock read of one slot, the call) is inlined into every
 * op's generated entry (dk_dispatch.h, dk_op_define.h). Everything here runs under the registry
 * lock (dk_lock_private.h). Reading the state is dk_introspect.c's job; the error and trace paths are
 * dk_dispatch_errors.c's; boxed calls are dk_boxed.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dk_dispatch.h"
#include "dk_keys_private.h"
#include "dk_lock_private.h"
#include "dk_op_private.h"

/* ------------------------------------------------------------------------------------------ */
/* State (registry lock)                                                                      */

static struct dk__registration *dk__fallbacks[DK_NUM_KEYS];
static struct dk__registration *dk__all_regs;
static dk_op **dk__ops;
static int dk__nops, dk__capops;

int dk__trace_enabled;

static _Thread_local dk__journal *dk__tls_journal; /* Note [Registration journal] */

dk__journal *dk__journal_swap(dk__journal *j)
{
    dk__journal *prev = dk__tls_journal;
    dk__tls_journal = j;
    return prev;
}

/* ------------------------------------------------------------------------------------------ */
/* Table computation (lock held)                                                              */

/*
 * Note [Slot precedence]
 * A slot is filled from the first that exists of: the op's newest kernel at this key; the op's
 * composite (backend keys only: a composite is device-generic code and must not swallow a
 * functionality key); the key's newest fallback; nothing. A fallthrough at the kernel or the
 * fallback level resolves the slot to "fallthrough", which drops the key from the op's mask so
 * dispatch goes straight to the next key.
 *
 * The composite fills every backend slot, claimed or not: an unclaimed vendor slot serves no
 * device (no device type maps to it until it is claimed), so nothing reaches it, and this way
 * claiming a key never has to recompute a table (dk_keys.c stays a leaf). Dumps show a slot
 * only once its key is claimed or something was registered at it (dk__op_key_shown_locked).
 */
static void dk__resolve(const dk_op *op, dk_key k, dk_slot *slot, dk_provenance *prov, const char **name)
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
    } else if (dk_key_is_backend(k) && p->composite) {
        r = p->composite;
        *prov = DK_PROV_COMPOSITE;
    } else if (dk__fallbacks[k]) {
        r = dk__fallbacks[k];
        *prov = r->kernel.flags & DK__KERNEL_CPU_COPY ? DK_PROV_CPU_COPY : DK_PROV_FALLBACK;
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

static void dk__recompute_all_locked(void)
{
    for (int i = 0; i < dk__nops; i++) dk__op_recompute_locked(dk__ops[i]);
}

bool dk__op_key_shown_locked(const dk_op *op, dk_key k)
{
    if (k == DK_KEY_UNDEFINED || k >= DK_NUM_KEYS) return false;
    if (dk__key_names[k]) return true;
    dk_provenance p = op->priv ? op->priv->prov[k] : DK_PROV_MISSING;
    return p != DK_PROV_MISSING && p != DK_PROV_COMPOSITE;
}

/* ------------------------------------------------------------------------------------------ */
/* The op list                                                                                */

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

dk_status dk__op_ensure_locked(dk_op *op)
{
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
    p->index = dk__nops;
    op->priv = p;
    dk__ops[dk__nops++] = op;
    dk__op_recompute_locked(op);
    return DK_OK;
}

void dk__op_add(dk_op *op)
{
    char why[256] = "";
    dk__lock();
    if (dk__op_ensure_locked(op) != DK_OK) snprintf(why, sizeof why, "%s", dk_last_error());
    dk__unlock();
    if (why[0]) dk_warn("%s", why);
}

int dk__op_index(const dk_op *op)
{
    /* priv is written once, under the lock, before the op is published in the list. */
    const struct dk__op_private *p = __atomic_load_n(&op->priv, __ATOMIC_ACQUIRE);
    return p ? p->index : -1;
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
        return dk_error(DK_EINVAL, "fallback at %s: fallbacks serve every op and must be boxed", dk_key_name(key));
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

    char warning[512] = ""; /* issued after unlocking: the handler is the user's code */
    dk__lock();
    dk_status st = op ? dk__op_ensure_locked(op) : DK_OK;
    if (st) {
        dk__unlock();
        free(r);
        return st;
    }
    struct dk__registration **top = dk__stack_of(op, kind, key);
    if (*top) {
        if (op)
            snprintf(warning, sizeof warning, "%s: %s '%s' at %s overrides '%s'", op->name, dk__where(kind), r->name,
                     kind == DK__REG_COMPOSITE ? "all backends" : dk_key_name(key), (*top)->name);
        else
            snprintf(warning, sizeof warning, "fallback '%s' at %s overrides '%s'", r->name, dk_key_name(key),
                     (*top)->name);
    }
    r->below = *top;
    *top = r;
    r->all_prev = NULL;
    r->all_next = dk__all_regs;
    if (dk__all_regs) dk__all_regs->all_prev = r;
    dk__all_regs = r;
    if (op) dk__op_recompute_locked(op);
    else dk__recompute_all_locked();
    dk__unlock();
    dk__journal *j = dk__tls_journal;
    if (j) {
        if (j->n == j->cap) {
            int cap = j->cap ? 2 * j->cap : 16;
            dk_handle *h = realloc(j->handles, (size_t)cap * sizeof *h);
            if (h) {
                j->handles = h;
                j->cap = cap;
            }
        }
        if (j->n < j->cap) j->handles[j->n++] = r;
        else j->overflow = true;
    }
    if (warning[0]) dk_warn("%s", warning);
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
    if (r->op) dk__op_recompute_locked(r->op);
    else dk__recompute_all_locked();
    dk__unlock();
    /* Kernels are code and stay valid; the name may still be read by a trace that copied it
     * under the lock, and by nothing else. */
    free(r);
    return DK_OK;
}

void dk_dispatch_set_trace(bool on)
{
    dk__lock();
    __atomic_store_n(&dk__trace_enabled, on ? 1 : 0, __ATOMIC_RELAXED);
    dk__recompute_all_locked(); /* the fast entries (dk_slot.fast) depend on the flag */
    dk__unlock();
}

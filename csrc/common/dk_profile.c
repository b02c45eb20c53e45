/*
 * dk_profile.c — the Profile key: a boxed fallback that times every call below it, and the
 * counters it keeps.
 *
 * Note [Profile counters]
 * Profile owns its counters: one row per (op, backend key), found by the op's fixed index in the
 * op list (dk__op_index), in chunks of DK__PROF_CHUNK ops allocated the first time an op of the
 * chunk is profiled and never freed. Adding to a row is two relaxed atomic adds and takes no
 * lock; readers and dk_profile_reset use atomic loads and stores, so a table formatted while
 * other threads reset and call reads each row whole or not at all, never past an allocation.
 */
#include "dk_profile.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dk_boxed.h"
#include "dk_introspect.h"
#include "dk_op_private.h"
#include "dk_strbuf_private.h"

#define DK__PROF_CHUNK 64
#define DK__PROF_CHUNKS 1024 /* up to 65,536 ops */
#define DK__PROF_KEYS (DK_KEY_BACKEND_LAST + 1)

typedef struct {
    uint64_t count[DK__PROF_KEYS];
    uint64_t ns[DK__PROF_KEYS];
    /* of those, the calls the CPU fallback served (Note [The CPU fallback]) */
    uint64_t fb_count[DK__PROF_KEYS];
    uint64_t fb_ns[DK__PROF_KEYS];
} dk__prof_row;

static dk__prof_row *dk__prof_chunks[DK__PROF_CHUNKS];
static pthread_mutex_t dk__prof_alloc = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t dk__prof_atfork_once = PTHREAD_ONCE_INIT;

/* fork(): a child must not inherit the allocation lock held (Note [The registry lock]). */
static void dk__prof_lock(void) { pthread_mutex_lock(&dk__prof_alloc); }
static void dk__prof_unlock(void) { pthread_mutex_unlock(&dk__prof_alloc); }
static void dk__prof_atfork(void) { pthread_atfork(dk__prof_lock, dk__prof_unlock, dk__prof_unlock); }

static dk__prof_row *dk__prof_row_of(const dk_op *op, bool create)
{
    const int i = dk__op_index(op);
    if (i < 0 || i >= DK__PROF_CHUNK * DK__PROF_CHUNKS) return NULL;
    dk__prof_row **slot = &dk__prof_chunks[i / DK__PROF_CHUNK];
    dk__prof_row *c = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!c && create) {
        pthread_once(&dk__prof_atfork_once, dk__prof_atfork);
        pthread_mutex_lock(&dk__prof_alloc);
        c = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
        if (!c) {
            c = calloc(DK__PROF_CHUNK, sizeof *c);
            if (c) __atomic_store_n(slot, c, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&dk__prof_alloc);
    }
    return c ? &c[i % DK__PROF_CHUNK] : NULL;
}

static uint64_t dk__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Times everything below Profile, so the row is attributed to the backend that served it. */
static dk_status dk__profile_kernel(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    (void)ctx;
    dk_key backend = dk_keyset_highest(ks & DK_BACKEND_KEYS);
    /* the slot that serves the call, read as a dispatch reads it: without the registry lock */
    const bool fallback = backend < DK__PROF_KEYS && op->priv &&
                          __atomic_load_n(&op->priv->prov[backend], __ATOMIC_RELAXED) == DK_PROV_CPU_COPY;
    uint64_t t0 = dk__now_ns();
    dk_status st = dk_op_redispatch_boxed(op, ks, stack);
    uint64_t t1 = dk__now_ns();
    dk__prof_row *r = dk__prof_row_of(op, true); /* NULL only out of memory: not counted */
    if (r && backend < DK__PROF_KEYS) {
        __atomic_fetch_add(&r->count[backend], 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&r->ns[backend], t1 - t0, __ATOMIC_RELAXED);
        if (fallback) {
            __atomic_fetch_add(&r->fb_count[backend], 1, __ATOMIC_RELAXED);
            __atomic_fetch_add(&r->fb_ns[backend], t1 - t0, __ATOMIC_RELAXED);
        }
    }
    return st;
}

/* Called once by dk_init (dk_init.c). */
void dk__profile_install(void);
void dk__profile_install(void)
{
    if (dk_register_fallback(DK_KEY_PROFILE, dk_kernel_boxed(dk__profile_kernel, NULL, "dk_profile"), NULL))
        dk_warn("%s", dk_last_error());
}

static void dk__prof_read(const dk_op *op, dk_key k, uint64_t *count, uint64_t *ns)
{
    const dk__prof_row *r = dk__prof_row_of(op, false);
    *count = r ? __atomic_load_n(&r->count[k], __ATOMIC_RELAXED) : 0;
    *ns = r ? __atomic_load_n(&r->ns[k], __ATOMIC_RELAXED) : 0;
}

static void dk__prof_read_fallback(const dk_op *op, dk_key k, uint64_t *count, uint64_t *ns)
{
    const dk__prof_row *r = dk__prof_row_of(op, false);
    *count = r ? __atomic_load_n(&r->fb_count[k], __ATOMIC_RELAXED) : 0;
    *ns = r ? __atomic_load_n(&r->fb_ns[k], __ATOMIC_RELAXED) : 0;
}

int dk_profile_rows(dk_profile_row *out, int max)
{
    int n = 0, nops = dk_op_count();
    if (!out) max = 0;
    for (int i = 0; i < nops; i++) {
        const dk_op *op = dk_op_at(i);
        if (!op) continue;
        for (dk_key k = 0; k < DK__PROF_KEYS; k++) {
            uint64_t c, ns;
            dk__prof_read(op, k, &c, &ns);
            if (!c) continue;
            if (n < max) out[n] = (dk_profile_row){op, k, c, ns};
            n++;
        }
    }
    return n;
}

dk_status dk_profile_get(const dk_op *op, dk_key backend, uint64_t *count, uint64_t *total_ns)
{
    if (!op || !count || !total_ns) return dk_error(DK_EINVAL, "dk_profile_get: NULL argument");
    if (backend < 0 || backend >= DK_NUM_KEYS)
        return dk_error(DK_EINVAL, "dk_profile_get: key %d out of range", backend);
    if (backend >= DK__PROF_KEYS) {
        *count = *total_ns = 0; /* only backend keys serve calls */
        return DK_OK;
    }
    dk__prof_read(op, backend, count, total_ns);
    return DK_OK;
}

dk_status dk_profile_get_fallback(const dk_op *op, dk_key backend, uint64_t *count, uint64_t *total_ns)
{
    if (!op || !count || !total_ns) return dk_error(DK_EINVAL, "dk_profile_get_fallback: NULL argument");
    if (backend < 0 || backend >= DK_NUM_KEYS)
        return dk_error(DK_EINVAL, "dk_profile_get_fallback: key %d out of range", backend);
    if (backend >= DK__PROF_KEYS) {
        *count = *total_ns = 0;
        return DK_OK;
    }
    dk__prof_read_fallback(op, backend, count, total_ns);
    return DK_OK;
}

void dk_profile_reset(void)
{
    for (int c = 0; c < DK__PROF_CHUNKS; c++) {
        dk__prof_row *rows = __atomic_load_n(&dk__prof_chunks[c], __ATOMIC_ACQUIRE);
        if (!rows) continue;
        for (int i = 0; i < DK__PROF_CHUNK; i++)
            for (int k = 0; k < DK__PROF_KEYS; k++) {
                __atomic_store_n(&rows[i].count[k], 0, __ATOMIC_RELAXED);
                __atomic_store_n(&rows[i].ns[k], 0, __ATOMIC_RELAXED);
                __atomic_store_n(&rows[i].fb_count[k], 0, __ATOMIC_RELAXED);
                __atomic_store_n(&rows[i].fb_ns[k], 0, __ATOMIC_RELAXED);
            }
    }
}

/* One pass over the ops, each row read once into the text: no count taken before the rows are
 * read (Note [Profile counters]). */
char *dk_profile_format(void)
{
    dk__strbuf b = {0};
    dk__strbuf_printf(&b, "%-28s %-10s %10s %14s %14s\n", "op", "backend", "calls", "total (ms)", "mean (us)");
    int nops = dk_op_count();
    for (int i = 0; i < nops; i++) {
        const dk_op *op = dk_op_at(i);
        if (!op) continue;
        for (dk_key k = 0; k < DK__PROF_KEYS; k++) {
            uint64_t c, ns, fc, fns;
            dk__prof_read(op, k, &c, &ns);
            dk__prof_read_fallback(op, k, &fc, &fns);
            if (fc > c) fc = c, fns = ns; /* read apart: calls may land between the reads */
            if (c > fc)
                dk__strbuf_printf(&b, "%-28s %-10s %10llu %14.3f %14.3f\n", op->name, dk_key_name(k),
                                  (unsigned long long)(c - fc), (double)(ns - fns) / 1e6,
                                  (double)(ns - fns) / 1e3 / (double)(c - fc));
            if (fc)
                dk__strbuf_printf(&b, "%-28s %s (cpu copy) %10llu %14.3f %14.3f\n", op->name, dk_key_name(k),
                                  (unsigned long long)fc, (double)fns / 1e6, (double)fns / 1e3 / (double)fc);
        }
    }
    return dk__strbuf_finish(&b);
}

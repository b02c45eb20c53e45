/* dk_profile.c — the Profile key's boxed fallback, and reading its counters. */
#include "dk_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dk_internal.h"

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
    uint64_t t0 = dk__now_ns();
    dk_status st = dk_op_redispatch_boxed(op, ks, stack);
    uint64_t t1 = dk__now_ns();
    dk__profile_add(op, dk_keyset_highest(ks & DK_BACKEND_KEYS), t1 - t0);
    return st;
}

/* Called once by the core's init (Note [Core init without constructors]). */
void dk__profile_install(void)
{
    if (dk_register_fallback(DK_KEY_PROFILE, dk_kernel_boxed(dk__profile_kernel, NULL, "dk_profile"), NULL))
        dk_warn("%s", dk_last_error());
}

int dk_profile_rows(dk_profile_row *out, int max)
{
    int n = 0, nops = dk_op_count();
    for (int i = 0; i < nops; i++) {
        const dk_op *op = dk_op_at(i);
        for (dk_key k = 0; k <= DK_KEY_BACKEND_LAST; k++) {
            uint64_t c, ns;
            dk__profile_read(op, k, &c, &ns);
            if (!c) continue;
            if (n < max) {
                out[n].op = op;
                out[n].backend = k;
                out[n].count = c;
                out[n].total_ns = ns;
            }
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
    dk__profile_read(op, backend, count, total_ns);
    return DK_OK;
}

void dk_profile_reset(void)
{
    int nops = dk_op_count();
    for (int i = 0; i < nops; i++) dk__profile_clear(dk_op_at(i));
}

char *dk_profile_format(void)
{
    int n = dk_profile_rows(NULL, 0);
    dk_profile_row *rows = calloc((size_t)(n ? n : 1), sizeof *rows);
    if (!rows) {
        dk_error(DK_ENOMEM, "dk_profile_format: out of memory");
        return NULL;
    }
    n = dk_profile_rows(rows, n);
    size_t cap = 128 + (size_t)n * 128;
    char *s = malloc(cap);
    if (!s) {
        free(rows);
        dk_error(DK_ENOMEM, "dk_profile_format: out of memory");
        return NULL;
    }
    size_t used = (size_t)snprintf(s, cap, "%-28s %-10s %10s %14s %14s\n", "op", "backend", "calls",
                                   "total (ms)", "mean (us)");
    for (int i = 0; i < n && used < cap; i++) {
        double total_ms = (double)rows[i].total_ns / 1e6;
        double mean_us = (double)rows[i].total_ns / 1e3 / (double)rows[i].count;
        used += (size_t)snprintf(s + used, cap - used, "%-28s %-10s %10llu %14.3f %14.3f\n",
                                 rows[i].op->name, dk_key_name(rows[i].backend),
                                 (unsigned long long)rows[i].count, total_ms, mean_us);
    }
    free(rows);
    return s;
}

/* dk_status.c — status names, the thread-local error message, and warnings. */
#include "dk_status.h"

#include <stdio.h>
#include <string.h>

/* Long enough for any message dkit writes (they name an op, a parameter and two devices). */
#define DK__ERRMSG_MAX 1024

static _Thread_local char dk__errmsg[DK__ERRMSG_MAX];
static _Thread_local dk_status dk__errcode;

const char *dk_status_name(dk_status st)
{
    switch (st) {
#define DK__STATUS_CASE(name, value, py, text) \
    case name:                                 \
        return #name;
        DK_STATUS_TABLE(DK__STATUS_CASE)
#undef DK__STATUS_CASE
    default:
        return "DK_UNKNOWN";
    }
}

const char *dk_last_error(void) { return dk__errmsg; }
dk_status dk_last_status(void) { return dk__errcode; }

void dk_clear_error(void)
{
    dk__errmsg[0] = '\0';
    dk__errcode = DK_OK;
}

dk_status dk_verror(dk_status st, const char *fmt, va_list ap)
{
    /* Format into a scratch buffer first: callers may pass dk_last_error() as an argument. */
    char tmp[DK__ERRMSG_MAX];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    memcpy(dk__errmsg, tmp, sizeof tmp);
    dk__errcode = st;
    return st;
}

dk_status dk_error(dk_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dk_verror(st, fmt, ap);
    va_end(ap);
    return st;
}

static void dk__default_warning(const char *message, void *ctx)
{
    (void)ctx;
    fprintf(stderr, "dkit: warning: %s\n", message);
}

/* Written rarely (tests, the Python layer) and read on warnings only; atomics keep TSan quiet. */
static dk_warning_handler dk__warn_fn = dk__default_warning;
static void *dk__warn_ctx;

void dk_set_warning_handler(dk_warning_handler fn, void *ctx)
{
    __atomic_store_n(&dk__warn_ctx, ctx, __ATOMIC_RELAXED);
    __atomic_store_n(&dk__warn_fn, fn ? fn : dk__default_warning, __ATOMIC_RELEASE);
}

void dk_warn(const char *fmt, ...)
{
    char msg[DK__ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    dk_warning_handler fn = __atomic_load_n(&dk__warn_fn, __ATOMIC_ACQUIRE);
    fn(msg, __atomic_load_n(&dk__warn_ctx, __ATOMIC_RELAXED));
}

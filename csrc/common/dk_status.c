/* dk_status.c — status names, the thread-local error message, and warnings. */
#include "dk_status.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Long enough for any message dkit writes (they name an op, a parameter and two devices). */
#define DK__ERRMSG_MAX 1024

/*
 * Note [Small static TLS]
 * libdkit holds an initial-exec thread-local (Note [TLS on the fast path] in dk_tls.h), so when
 * Python dlopens it, all of libdkit's thread-locals come out of glibc's small surplus of static
 * TLS, which other dlopened libraries with initial-exec TLS need too: the HIP runtime
 * (libamdhip64, 272 bytes) failed to load after libdkit ("cannot allocate memory in static TLS
 * block") while the message buffer below was a 1 KiB thread-local array. So each thread's
 * buffer is on the heap, made on its first error and freed when the thread exits, and only a
 * pointer is thread-local.
 */
static _Thread_local char *dk__errmsg;
static _Thread_local dk_status dk__errcode;
static pthread_key_t dk__errmsg_key;
static pthread_once_t dk__errmsg_once = PTHREAD_ONCE_INIT;
static bool dk__errmsg_key_ok;

static void dk__errmsg_key_init(void) { dk__errmsg_key_ok = pthread_key_create(&dk__errmsg_key, free) == 0; }

/* This thread's buffer, made on first use; NULL when out of memory. */
static char *dk__errmsg_buffer(void)
{
    if (dk__errmsg) return dk__errmsg;
    pthread_once(&dk__errmsg_once, dk__errmsg_key_init);
    char *b = calloc(1, DK__ERRMSG_MAX);
    if (!b) return NULL;
    if (dk__errmsg_key_ok) (void)pthread_setspecific(dk__errmsg_key, b); /* freed at thread exit */
    return dk__errmsg = b;
}

const char *dk_status_name(dk_status st)
{
    switch (st) {
#define DK__STATUS_CASE(name, value, py, text) \
    case name: return #name;
        DK_STATUS_TABLE(DK__STATUS_CASE)
#undef DK__STATUS_CASE
    default: return "DK_UNKNOWN";
    }
}

const char *dk_last_error(void)
{
    if (dk__errmsg) return dk__errmsg;
    return dk__errcode != DK_OK ? "(no message: out of memory for it)" : "";
}
dk_status dk_last_status(void) { return dk__errcode; }

void dk_clear_error(void)
{
    if (dk__errmsg) dk__errmsg[0] = '\0';
    dk__errcode = DK_OK;
}

dk_status dk_verror(dk_status st, const char *fmt, va_list ap)
{
    /* Format into a scratch buffer first: callers may pass dk_last_error() as an argument. */
    char tmp[DK__ERRMSG_MAX];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    char *b = dk__errmsg_buffer();
    if (b) memcpy(b, tmp, sizeof tmp);
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

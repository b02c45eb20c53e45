/*
 * dk_status.h — status codes and the thread-local error message.
 *
 * Every fallible dkit function returns a dk_status. DK_OK is 0; anything else means the call
 * did nothing observable except set this thread's message (dk_last_error()), which names the op
 * and the offending argument. User input never aborts the process.
 *
 * The codes are one X-macro table so that names, default messages and the Python exception each
 * maps to stay in one place (csrc/python maps them to exception types).
 */
#ifndef DK_STATUS_H
#define DK_STATUS_H

#include <stdarg.h>

#include "dk_export.h"

#ifdef __cplusplus
extern "C" {
#endif

/*  X(name, value, python exception, default text) */
#define DK_STATUS_TABLE(X)                                 \
    X(DK_OK, 0, None, "success")                           \
    X(DK_EINVAL, 1, ValueError, "invalid argument")        \
    X(DK_ETYPE, 2, TypeError, "wrong type")                \
    X(DK_EINDEX, 3, IndexError, "index out of range")      \
    X(DK_ENOTIMPL, 4, NotImplementedError, "no kernel")    \
    X(DK_EBUFFER, 5, BufferError, "buffer protocol error") \
    X(DK_ENOMEM, 6, MemoryError, "out of memory")          \
    X(DK_ENOENT, 7, FileNotFoundError, "not found")        \
    X(DK_EABI, 8, ImportError, "ABI version mismatch")     \
    X(DK_ERUNTIME, 9, RuntimeError, "runtime error")

typedef enum {
#define DK__STATUS_ENUM(name, value, py, text) name = value,
    DK_STATUS_TABLE(DK__STATUS_ENUM)
#undef DK__STATUS_ENUM
        DK_STATUS_COUNT
} dk_status;

/* "DK_EINVAL" etc.; "DK_UNKNOWN" for values outside the table. */
DK_API const char *dk_status_name(dk_status st);

/* This thread's message for the last failing call; "" if none was set. */
DK_API const char *dk_last_error(void);
DK_API dk_status dk_last_status(void);

/* Set this thread's message and return `st`, so callers can write `return dk_error(...)`. */
DK_API dk_status dk_error(dk_status st, const char *fmt, ...) DK_PRINTF(2, 3);
DK_API dk_status dk_verror(dk_status st, const char *fmt, va_list ap);
DK_API void dk_clear_error(void);

/*
 * Warnings (e.g. a kernel overriding another) go to a process-wide handler; the default prints
 * "dkit: warning: ..." to stderr. Pass NULL to restore it.
 */
typedef void (*dk_warning_handler)(const char *message, void *ctx);
DK_API void dk_set_warning_handler(dk_warning_handler fn, void *ctx);
DK_API void dk_warn(const char *fmt, ...) DK_PRINTF(1, 2);

#ifdef __cplusplus
}
#endif
#endif /* DK_STATUS_H */

/* dk_strbuf_private.h — a growable string for the core's text dumps. Not installed. */
#ifndef DK_STRBUF_PRIVATE_H
#define DK_STRBUF_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>

#include "dk_export.h"

/* Zero-initialise. On allocation failure it stops growing and dk__strbuf_finish reports it. */
typedef struct {
    char *s;
    size_t len, cap;
    bool failed;
} dk__strbuf;

void dk__strbuf_printf(dk__strbuf *b, const char *fmt, ...) DK_PRINTF(2, 3);
/* The string (caller frees), or NULL with DK_ENOMEM set after a failure. Never NULL otherwise,
 * even for nothing written. */
char *dk__strbuf_finish(dk__strbuf *b);

#endif /* DK_STRBUF_PRIVATE_H */

/* dk_strbuf.c — a growable string (dk_strbuf_private.h). */
#include "dk_strbuf_private.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "dk_status.h"

void dk__strbuf_printf(dk__strbuf *b, const char *fmt, ...)
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

char *dk__strbuf_finish(dk__strbuf *b)
{
    if (!b->failed && !b->s) dk__strbuf_printf(b, "%s", "");
    if (b->failed) {
        free(b->s);
        b->s = NULL;
        dk_error(DK_ENOMEM, "out of memory formatting text");
        return NULL;
    }
    return b->s;
}

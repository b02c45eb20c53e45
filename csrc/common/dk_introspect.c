/* dk_introspect.c — tables with provenance, dumps and schemas (dk_introspect.h). */
#include "dk_introspect.h"

#include <stdio.h>
#include <stdlib.h>

#include "dk_lock_private.h"
#include "dk_op_private.h"
#include "dk_strbuf_private.h"

const char *dk_provenance_name(dk_provenance p)
{
    static const char *const names[] = {"missing",  "kernel",      "composite",
                                        "fallback", "fallthrough", "fallback (cpu copy)"};
    return (unsigned)p < DK_COUNTOF(names) ? names[p] : "?";
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
        if (!dk__op_key_shown_locked(op, k)) continue;
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

char *dk_op_dump(const dk_op *op)
{
    if (!op) {
        dk_error(DK_EINVAL, "dk_op_dump: op is NULL");
        return NULL;
    }
    dk_table_entry e[DK_NUM_KEYS];
    int n = dk_op_table(op, e, DK_NUM_KEYS);
    dk__strbuf b = {0};
    dk__strbuf_printf(&b, "%s\n", dk_op_schema(op));
    dk__strbuf_printf(&b, "  %-12s %-12s %s\n", "key", "provenance", "kernel");
    for (int i = 0; i < n && i < DK_NUM_KEYS; i++) {
        dk__strbuf_printf(&b, "  %-12s %-12s %s%s\n", dk_key_name(e[i].key), dk_provenance_name(e[i].provenance),
                          e[i].kernel_name && e[i].provenance != DK_PROV_FALLTHROUGH ? e[i].kernel_name : "-",
                          e[i].boxed ? " (boxed)" : "");
    }
    return dk__strbuf_finish(&b);
}

/* PyTorch's schema syntax: written tensors carry an alias set and '!', e.g. Tensor(a!) out,
 * optional ones a trailing '?', e.g. Tensor(b!)? argmax. */
static char *dk__format_schema(const dk_op *op)
{
    dk__strbuf b = {0};
    char alias = 'a';
    dk__strbuf_printf(&b, "dkit::%s(", op->name);
    for (int i = 0; i < op->nargs; i++) {
        const dk_arg_info *a = &op->args[i];
        const char *sep = i ? ", " : "";
        bool tensor = a->kind == DK_ARG_TENSOR || a->kind == DK_ARG_OPT_TENSOR;
        if (tensor && a->out)
            dk__strbuf_printf(&b, "%sTensor(%c!)%s %s", sep, alias++, a->kind == DK_ARG_OPT_TENSOR ? "?" : "", a->name);
        else dk__strbuf_printf(&b, "%s%s %s", sep, dk_arg_kind_name(a->kind), a->name);
    }
    dk__strbuf_printf(&b, ") -> ()");
    return dk__strbuf_finish(&b);
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

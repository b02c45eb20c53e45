/*
 * dk_pymodule.c — the module dkit._C: definition, multi-phase init, module state, exceptions.
 *
 * Multi-phase init (PEP 489) lets the interpreter create the module object and its zeroed state
 * first and run dk__exec on it, so everything the module owns sits in that state (Note [No
 * static PyObject globals] in dk_py.h) and exec can fail cleanly: m_clear releases whatever it
 * had built.
 *
 * The core library (libdkit.so, next to this module) registers its ops and kernels from ELF
 * constructors when the dynamic loader maps it, i.e. before dk__exec runs; the op callables
 * are therefore generated from a complete registry.
 */
#include <stdarg.h>
#include <string.h>

#include "dk_py.h"
#include "dk_pydlpack.h"

dk_py_state *dk_py_state_of_module(PyObject *module) { return (dk_py_state *)PyModule_GetState(module); }

/* ------------------------------------------------------------------------------------------ */
/* Exceptions                                                                                 */

/* From the one table in dk_status.h: the name of the builtin each status maps to. */
static const char *const dk__py_base_name[DK_STATUS_COUNT] = {
#define DK__PY_BASE(name, value, py, text) [value] = #py,
    DK_STATUS_TABLE(DK__PY_BASE)
#undef DK__PY_BASE
};
static const char *const dk__status_text[DK_STATUS_COUNT] = {
#define DK__PY_TEXT(name, value, py, text) [value] = text,
    DK_STATUS_TABLE(DK__PY_TEXT)
#undef DK__PY_TEXT
};

static PyObject *dk__exc_for(dk_py_state *s, dk_status st)
{
    /* A status outside the table (a backend returning garbage) is still an error. */
    if (st <= DK_OK || st >= DK_STATUS_COUNT || !s->exc[st]) return s->exc[DK_ERUNTIME];
    return s->exc[st];
}

PyObject *dk_py_raise(dk_py_state *s, dk_status st)
{
    const char *msg = dk_last_error();
    if (!msg || !msg[0]) msg = (st > DK_OK && st < DK_STATUS_COUNT) ? dk__status_text[st] : NULL;
    if (!msg) msg = "unknown dkit error";
    /* Not PyErr_SetString: the message may quote bytes that are not UTF-8 (a path, dlerror()'s
     * text), which it would fail to decode, leaving the exception without any message. */
    PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "backslashreplace");
    if (text) {
        PyErr_SetObject(dk__exc_for(s, st), text);
        Py_DECREF(text);
    }
    return NULL;
}

PyObject *dk_py_raise_fmt(dk_py_state *s, dk_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (msg) {
        PyErr_SetObject(dk__exc_for(s, st), msg);
        Py_DECREF(msg);
    }
    return NULL;
}

/*
 * DkitError(RuntimeError) is the base; every other status gets Dkit<Builtin>(DkitError,
 * <Builtin>), so `except ValueError` and `except dkit.DkitError` both catch a bad argument.
 * The builtin is looked up by the name in the status table, which keeps the table the only
 * place that knows the mapping.
 */
static int dk__exceptions_init(PyObject *m, dk_py_state *s)
{
    PyObject *builtins = PyEval_GetBuiltins(); /* borrowed */
    s->exc[DK_ERUNTIME] = PyErr_NewExceptionWithDoc(
        "dkit._C.DkitError", "Base of every error raised by dkit; a RuntimeError.", PyExc_RuntimeError, NULL);
    if (!s->exc[DK_ERUNTIME] || PyModule_AddObjectRef(m, "DkitError", s->exc[DK_ERUNTIME]) < 0) return -1;
    for (int st = DK_OK + 1; st < DK_STATUS_COUNT; st++) {
        if (st == DK_ERUNTIME || !dk__py_base_name[st]) continue; /* a gap in the table: DkitError serves it */
        PyObject *builtin = builtins ? PyDict_GetItemString(builtins, dk__py_base_name[st]) : NULL;
        if (!builtin) {
            PyErr_Format(PyExc_SystemError, "dkit: no builtin exception %s", dk__py_base_name[st]);
            return -1;
        }
        char qual[96], doc[160];
        PyOS_snprintf(qual, sizeof qual, "dkit._C.Dkit%s", dk__py_base_name[st]);
        PyOS_snprintf(doc, sizeof doc, "dkit's %s (status %s): a DkitError and a %s.", dk__status_text[st],
                      dk_status_name((dk_status)st), dk__py_base_name[st]);
        PyObject *bases = PyTuple_Pack(2, s->exc[DK_ERUNTIME], builtin);
        if (!bases) return -1;
        s->exc[st] = PyErr_NewExceptionWithDoc(qual, doc, bases, NULL);
        Py_DECREF(bases);
        if (!s->exc[st] || PyModule_AddObjectRef(m, qual + sizeof "dkit._C." - 1, s->exc[st]) < 0) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Module state                                                                               */

static PyObject *dk__tuple_of_str(int n, ...)
{
    PyObject *t = PyTuple_New(n);
    if (!t) return NULL;
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        PyObject *str = PyUnicode_InternFromString(va_arg(ap, const char *));
        if (!str) {
            va_end(ap);
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, str);
    }
    va_end(ap);
    return t;
}

static int dk__strings_init(dk_py_state *s)
{
    if (!(s->s_dlpack = PyUnicode_InternFromString("__dlpack__"))) return -1;
    if (!(s->s_dlpack_device = PyUnicode_InternFromString("__dlpack_device__"))) return -1;
    if (!(s->kw_max_version = dk__tuple_of_str(1, "max_version"))) return -1;
    if (!(s->kw_stream_max_version = dk__tuple_of_str(2, "stream", "max_version"))) return -1;
    if (!(s->kw_stream = dk__tuple_of_str(1, "stream"))) return -1;
    if (!(s->max_version = Py_BuildValue("(ii)", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION))) return -1;
    return 0;
}

static int dk__exec(PyObject *m)
{
    dk_py_state *s = dk_py_state_of_module(m);
    if (dk__strings_init(s) < 0) return -1;
    if (dk__exceptions_init(m, s) < 0) return -1;
    if (dk_py_ops_init(m, s) < 0) return -1;
    if (dk_py_introspect_init(m, s) < 0) return -1;
    return 0;
}

static int dk__traverse(PyObject *m, visitproc visit, void *arg)
{
    dk_py_state *s = dk_py_state_of_module(m);
    if (!s) return 0;
    for (int i = 0; i < DK_STATUS_COUNT; i++) Py_VISIT(s->exc[i]);
    Py_VISIT(s->op_type);
    Py_VISIT(s->ops);
    Py_VISIT(s->max_version);
    return dk_py_dlpack_traverse(s, visit, arg);
}

static int dk__clear(PyObject *m)
{
    dk_py_state *s = dk_py_state_of_module(m);
    if (!s) return 0;
    for (int i = 0; i < DK_STATUS_COUNT; i++) Py_CLEAR(s->exc[i]);
    Py_CLEAR(s->op_type);
    Py_CLEAR(s->ops);
    Py_CLEAR(s->s_dlpack);
    Py_CLEAR(s->s_dlpack_device);
    Py_CLEAR(s->kw_max_version);
    Py_CLEAR(s->kw_stream_max_version);
    Py_CLEAR(s->kw_stream);
    Py_CLEAR(s->max_version);
    dk_py_dlpack_clear(s);
    return 0;
}

static void dk__free(void *m) { dk__clear((PyObject *)m); }

static PyModuleDef_Slot dk__slots[] = {
    {Py_mod_exec, (void *)dk__exec},
    {0, NULL},
};

static struct PyModuleDef dk__module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "dkit._C",
    .m_doc = "dkit's C extension: one callable per registered op (dkit._C.ops), introspection of the "
             "dispatcher, and the exceptions dkit raises. Tensors cross by DLPack and are never copied.",
    .m_size = sizeof(dk_py_state),
    .m_methods = dk_py_introspect_methods,
    .m_slots = dk__slots,
    .m_traverse = dk__traverse,
    .m_clear = dk__clear,
    .m_free = dk__free,
};

PyMODINIT_FUNC PyInit__C(void) { return PyModuleDef_Init(&dk__module); }

/*
 * dk_pyerrors.c — dkit's exception classes and raising them: every file of the extension reports
 * errors through here (a leaf: it calls nothing else of the extension).
 */
#include "dk_py.h" /* first: Python.h must precede every system header (CPython's rule) */

#include <stdarg.h>
#include <string.h>

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

PyObject *dk_py_fetch_exception(void)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb && value) PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
}

int dk_py_fetch_foreign(dk_py_state *s, PyObject **cause)
{
    *cause = NULL;
    if (!PyErr_ExceptionMatches(PyExc_Exception) || PyErr_ExceptionMatches(PyExc_MemoryError) ||
        PyErr_ExceptionMatches(s->exc[DK_ERUNTIME]))
        return 0;
    PyObject *value = dk_py_fetch_exception();
    if (!value) return 0; /* nothing left to replace (cannot happen after a fetch of an error) */
    *cause = value;
    return 1;
}

void dk_py_set_cause(PyObject *cause)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value) PyException_SetCause(value, cause); /* steals cause */
    else Py_DECREF(cause);
    PyErr_Restore(type, value, tb);
}

dk_status dk_py_status_of(PyObject *exc)
{
    PyObject *builtins = PyEval_GetBuiltins(); /* borrowed */
    for (int st = DK_OK + 1; builtins && st < DK_STATUS_COUNT; st++) {
        PyObject *builtin = dk__py_base_name[st] ? PyDict_GetItemString(builtins, dk__py_base_name[st]) : NULL;
        if (builtin && PyErr_GivenExceptionMatches(exc, builtin)) return (dk_status)st;
    }
    return DK_ERUNTIME;
}

/*
 * DkitError(RuntimeError) is the base; every other status gets Dkit<Builtin>(DkitError,
 * <Builtin>), so `except ValueError` and `except dkit.DkitError` both catch a bad argument.
 * The builtin is looked up by the name in the status table, which keeps the table the only
 * place that knows the mapping.
 */
int dk_py_errors_init(PyObject *m, dk_py_state *s)
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

/*
 * dk_pytunables.c — dkit._C.tunable: the CPU kernels' tunables (Note [Tunables] in
 * csrc/common/dk_tunables.h) from Python, for tests and benchmarks that force a path or a bound;
 * and, at import, the check of DKIT_TUNE's names (Note [DKIT_TUNE] in csrc/common/dk_tunables.c).
 */
#include "dk_py.h"
#include "dk_tunables.h"

/* tunable(name) -> int; tunable(name, value) -> the previous value */
static PyObject *dk__tunable(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = dk_py_state_of_module(m);
    if ((n != 1 && n != 2) || !PyUnicode_Check(args[0]))
        return dk_py_raise_fmt(s, DK_ETYPE, "tunable(name[, value]) takes a str and an optional int");
    const char *name = PyUnicode_AsUTF8(args[0]);
    if (!name) return NULL;
    int64_t v;
    if (n == 1) {
        if (dk_tunable_get(name, &v) != DK_OK) return dk_py_raise_fmt(s, dk_last_status(), "%s", dk_last_error());
        return PyLong_FromLongLong((long long)v);
    }
    if (!PyLong_Check(args[1])) return dk_py_raise_fmt(s, DK_ETYPE, "tunable: the value must be an int");
    const long long value = PyLong_AsLongLong(args[1]);
    if (value == -1 && PyErr_Occurred()) return NULL;
    if (dk_tunable_set(name, (int64_t)value, &v) != DK_OK)
        return dk_py_raise_fmt(s, dk_last_status(), "%s", dk_last_error());
    /* Note [Tunables Python reads]: the one that watches this name hears of the new value */
    PyObject *watcher = s->tunable_watchers ? PyDict_GetItemWithError(s->tunable_watchers, args[0]) : NULL;
    if (!watcher && PyErr_Occurred()) return NULL;
    if (watcher) {
        PyObject *r = PyObject_CallOneArg(watcher, args[1]);
        if (!r) return NULL;
        Py_DECREF(r);
    }
    return PyLong_FromLongLong((long long)v);
}

/*
 * Note [Tunables Python reads]
 * A tunable that Python code also reads on a hot path (host_cache.min_bytes, which decides
 * whether a torch output comes from the host cache: Note [Large outputs from the host cache]
 * in dkit/_frameworks/torch.py) is read there once, at import, and kept in a global; a call
 * through the C library would cost every allocation its time. _tunable_watch(name, fn) registers
 * fn (one per name) to be called with each value tunable(name, value) sets, so that the global
 * follows; DKIT_TUNE's values are set before Python reads them.
 */
static PyObject *dk__tunable_watch(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = dk_py_state_of_module(m);
    if (n != 2 || !PyUnicode_Check(args[0]) || !PyCallable_Check(args[1]))
        return dk_py_raise_fmt(s, DK_ETYPE, "_tunable_watch(name, fn) takes a str and a callable");
    int64_t v;
    if (dk_tunable_get(PyUnicode_AsUTF8(args[0]), &v) != DK_OK)
        return dk_py_raise_fmt(s, dk_last_status(), "%s", dk_last_error());
    if (!s->tunable_watchers && !(s->tunable_watchers = PyDict_New())) return NULL;
    if (PyDict_SetItem(s->tunable_watchers, args[0], args[1]) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef dk__functions[] = {
    {"tunable", DK_PY_FASTCALL(dk__tunable), METH_FASTCALL,
     "tunable(name[, value]) -> int: a CPU kernel tunable's value; with a value, sets it and returns the previous "
     "one (Note [Tunables]; DKIT_TUNE='name=value,...' sets them at load)."},
    {"_tunable_watch", DK_PY_FASTCALL(dk__tunable_watch), METH_FASTCALL,
     "_tunable_watch(name, fn): fn(value) is called with each value tunable(name, value) sets (Note [Tunables "
     "Python reads])."},
    {NULL, NULL, 0, NULL},
};

int dk_py_tunables_init(PyObject *module)
{
    dk_tunables_check_env();
    return PyModule_AddFunctions(module, dk__functions);
}

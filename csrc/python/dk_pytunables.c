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
    return PyLong_FromLongLong((long long)v);
}

static PyMethodDef dk__functions[] = {
    {"tunable", DK_PY_FASTCALL(dk__tunable), METH_FASTCALL,
     "tunable(name[, value]) -> int: a CPU kernel tunable's value; with a value, sets it and returns the previous "
     "one (Note [Tunables]; DKIT_TUNE='name=value,...' sets them at load)."},
    {NULL, NULL, 0, NULL},
};

int dk_py_tunables_init(PyObject *module)
{
    dk_tunables_check_env();
    return PyModule_AddFunctions(module, dk__functions);
}

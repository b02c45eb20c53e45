/*
 * dk_pymodule.c — the module dkit._C: definition, multi-phase init, module state.
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
#include "dk_py.h" /* first: Python.h must precede every system header (CPython's rule) */

#include <stdarg.h>
#include <string.h>

#include "dk_pydlpack.h"

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
    if (dk_py_errors_init(m, s) < 0) return -1;
    if (dk_py_load_backends_at_import(s) < 0) return -1; /* before the op callables */
    if (dk_py_ops_init(m, s) < 0) return -1;
    if (dk_py_introspect_init(m, s) < 0) return -1;
    if (dk_py_checked_init(m, s) < 0) return -1;
    if (dk_py_host_cache_init(m) < 0) return -1;
    if (dk_py_tunables_init(m) < 0) return -1;
    if (dk_py_torch_order_init(m) < 0) return -1;
    if (dk_py_device_init(m) < 0) return -1;
    if (dk_py_kernels_init(m, s) < 0) return -1;
    return dk_py_load_entry_point_backends(m); /* last: its Python code uses the complete module */
}

static int dk__traverse(PyObject *m, visitproc visit, void *arg)
{
    dk_py_state *s = dk_py_state_of_module(m);
    if (!s) return 0;
    for (int i = 0; i < DK_STATUS_COUNT; i++) Py_VISIT(s->exc[i]);
    Py_VISIT(s->op_type);
    Py_VISIT(s->checked_type);
    Py_VISIT(s->ops);
    Py_VISIT(s->max_version);
    Py_VISIT(s->stream_getters);
    Py_VISIT(s->tunable_watchers);
    Py_VISIT(s->backend_origins);
    Py_VISIT(s->backend_failures);
    Py_VISIT(s->kernel_tensor_type);
    Py_VISIT(s->python_kernel_type);
    Py_VISIT(s->python_kernels);
    return dk_py_dlpack_traverse(s, visit, arg);
}

static int dk__clear(PyObject *m)
{
    dk_py_state *s = dk_py_state_of_module(m);
    if (!s) return 0;
    for (int i = 0; i < DK_STATUS_COUNT; i++) Py_CLEAR(s->exc[i]);
    Py_CLEAR(s->op_type);
    Py_CLEAR(s->checked_type);
    Py_CLEAR(s->ops);
    Py_CLEAR(s->s_dlpack);
    Py_CLEAR(s->s_dlpack_device);
    Py_CLEAR(s->kw_max_version);
    Py_CLEAR(s->kw_stream_max_version);
    Py_CLEAR(s->kw_stream);
    Py_CLEAR(s->max_version);
    Py_CLEAR(s->stream_getters);
    Py_CLEAR(s->tunable_watchers);
    Py_CLEAR(s->backend_origins);
    Py_CLEAR(s->backend_failures);
    Py_CLEAR(s->python_kernels); /* first: removing a kernel needs nothing else of the state */
    Py_CLEAR(s->python_kernel_type);
    Py_CLEAR(s->kernel_tensor_type);
    dk_py_dlpack_clear(s);
    dk_py_torch_order_clear(s);
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

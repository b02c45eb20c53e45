/*
 * dk_pybackends_at_import.c — the backend libraries importing dkit._C loads: the GPU backends
 * shipped beside the extension, then those DKIT_BACKENDS names.
 *
 * `make python` and setup.py put libdkit_cuda.so and libdkit_hip.so, when built, next to _C
 * (csrc/gpu/rules.mk). Importing _C loads each one present, before the op callables are made,
 * so every later call dispatches to it. Loading runs no CUDA or HIP call (Note [No GPU call at
 * load time] in csrc/gpu/dk_gpu_backend.cu): without a driver the import works and
 * dkit.backends() says why the backend is unavailable. DKIT_GPU_BACKENDS=0 loads none.
 *
 * Note [A failing backend never breaks the import]
 * DKIT_BACKENDS=path:path... (os.pathsep-separated, empty entries skipped) names vendor backend
 * libraries to load at the same point, in order, for a user who cannot or will not call
 * dkit.load_backend in the program itself (a launcher script, a cluster's environment module).
 * A library that cannot be loaded (missing, not a dkit backend, built for another ABI, its
 * entry point failing; the core undoes what it registered: Note [A failed load leaves nothing
 * behind]) is reported and skipped, for GPU libraries and DKIT_BACKENDS alike: a RuntimeWarning
 * naming it and the reason, and a row in dkit.backends() (available False, the reason, where it
 * came from). Even with warnings turned into errors the import goes on: dkit without one
 * backend is still dkit, and a program that imports it for CPU work must not fail because of
 * an environment variable. Every library loaded here or by _C.load_backend has its origin
 * recorded (_C.backend_origins()), so that dkit.backends() says where each came from.
 */
/* first: Python.h must precede every system header (CPython's rule); its pyconfig.h defines
 * _GNU_SOURCE, which dladdr needs (a definition of our own here would clash with CPython
 * builds whose pyconfig.h defines it to 1) */
#include "dk_py.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dk_py_note_backend_origin(dk_py_state *s, const char *path, const char *origin, int replace)
{
    PyObject *key = PyUnicode_DecodeFSDefault(path);
    if (!key) return -1;
    int rc = 0;
    if (replace || !PyDict_Contains(s->backend_origins, key)) {
        PyObject *value = PyUnicode_FromString(origin);
        rc = value ? PyDict_SetItem(s->backend_origins, key, value) : -1;
        Py_XDECREF(value);
    }
    Py_DECREF(key);
    return rc;
}

/* One library: loaded and its origin noted, or reported and recorded as failed. -1 only for a
 * Python error that is not the load's (out of memory). */
static int dk__load(dk_py_state *s, const char *path, const char *origin)
{
    dk_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dk_load_backend(path);
    Py_END_ALLOW_THREADS
    if (st == DK_OK) return dk_py_note_backend_origin(s, path, origin, 0);
    PyObject *row = Py_BuildValue("(O&ss)", PyUnicode_DecodeFSDefault, path, origin, dk_last_error());
    if (!row || PyList_Append(s->backend_failures, row) < 0) {
        Py_XDECREF(row);
        return -1;
    }
    Py_DECREF(row);
    if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "dkit: backend %s (%s) not loaded: %s", path, origin,
                         dk_last_error()) < 0)
        PyErr_Clear(); /* Note [A failing backend never breaks the import] */
    return 0;
}

static int dk__load_gpu_backends(dk_py_state *s)
{
    const char *env = getenv("DKIT_GPU_BACKENDS");
    if (env && !strcmp(env, "0")) return 0;
    Dl_info info;
    if (!dladdr((void *)dk__load_gpu_backends, &info) || !info.dli_fname) return 0;
    const char *slash = strrchr(info.dli_fname, '/');
    const int dir_len = slash ? (int)(slash - info.dli_fname) : 1;
    const char *dir = slash ? info.dli_fname : ".";
    static const char *const names[] = {"libdkit_cuda.so", "libdkit_hip.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[4096];
        if (snprintf(path, sizeof path, "%.*s/%s", dir_len, dir, names[i]) >= (int)sizeof path) continue;
        if (access(path, R_OK) != 0) continue; /* not built: nothing to say */
        if (dk__load(s, path, "shipped with dkit") < 0) return -1;
    }
    return 0;
}

static int dk__load_env_backends(dk_py_state *s)
{
    const char *env = getenv("DKIT_BACKENDS");
    if (!env) return 0;
    char *copy = strdup(env);
    if (!copy) {
        PyErr_NoMemory();
        return -1;
    }
    int rc = 0;
    char *save = NULL;
    for (char *p = strtok_r(copy, ":", &save); p && rc == 0; p = strtok_r(NULL, ":", &save))
        if (p[0]) rc = dk__load(s, p, "DKIT_BACKENDS");
    free(copy);
    return rc;
}

int dk_py_load_backends_at_import(dk_py_state *s)
{
    s->backend_origins = PyDict_New();
    s->backend_failures = PyList_New(0);
    if (!s->backend_origins || !s->backend_failures) return -1;
    if (dk__load_gpu_backends(s) < 0) return -1;
    return dk__load_env_backends(s);
}

int dk_py_load_entry_point_backends(PyObject *module)
{
    /* Note [Backends from entry points] in dkit/_entry_points.py; _C is complete but for this. */
    PyObject *mod = PyImport_ImportModule("dkit._entry_points");
    PyObject *r = mod ? PyObject_CallMethod(mod, "load", "O", module) : NULL;
    Py_XDECREF(mod);
    if (r) {
        Py_DECREF(r);
        return 0;
    }
    /* Note [A failing backend never breaks the import]: not even the loader's own failure */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    PyErr_Clear();
    if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "dkit: the dkit.backends entry points were not loaded: %s",
                         text ? PyUnicode_AsUTF8(text) : "unknown error") < 0)
        PyErr_Clear();
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return 0;
}

/*
 * dk_pyintrospect.c — the dispatcher seen from Python: ops and their tables, keys, the
 * thread-local key sets, the profile, backends, tracing and the build configuration.
 *
 * These are thin: each converts arguments, calls one core function and converts the result.
 * None of them is on a hot path, so they favour plain METH_FASTCALL and clear messages.
 */
#include "dk_py.h" /* first: Python.h must precede every system header (CPython's rule) */

#include <string.h>

#include "dk_parallel.h" /* csrc/cpu: the CPU kernels' thread count */
#include "dk_pydlpack.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define DK__STATE(m) dk_py_state_of_module(m)

static int dk__check_nargs(dk_py_state *s, const char *fn, Py_ssize_t n, Py_ssize_t want)
{
    if (n == want) return 0;
    dk_py_raise_fmt(s, DK_ETYPE, "%s() takes %zd argument%s (%zd given)", fn, want, want == 1 ? "" : "s", n);
    return -1;
}

/* A str argument as UTF-8 for a lookup by name, or NULL with an exception set. A name with a NUL
 * in it names nothing (DkitValueError): C would read only the part before the NUL, and find
 * another op or key than the one asked for. */
static const char *dk__name_arg(dk_py_state *s, const char *fn, const char *what, PyObject *v)
{
    if (!PyUnicode_Check(v)) {
        dk_py_raise_fmt(s, DK_ETYPE, "%s(): the %s name must be a str, got %s", fn, what, Py_TYPE(v)->tp_name);
        return NULL;
    }
    Py_ssize_t len;
    const char *name = PyUnicode_AsUTF8AndSize(v, &len);
    if (name && strlen(name) != (size_t)len) {
        dk_py_raise_fmt(s, DK_EINVAL, "%s(): no %s named %R", fn, what, v);
        return NULL;
    }
    return name;
}

/* The op named by a str argument; DkitValueError if no op has that name. */
static const dk_op *dk__op_arg(dk_py_state *s, const char *fn, PyObject *const *args, Py_ssize_t n)
{
    if (dk__check_nargs(s, fn, n, 1) < 0) return NULL;
    const char *name = dk__name_arg(s, fn, "op", args[0]);
    if (!name) return NULL;
    const dk_op *op = dk_op_find(name);
    if (!op) dk_py_raise_fmt(s, DK_EINVAL, "%s(): no op named '%s'", fn, name);
    return op;
}

/* A key set argument: a non-negative int below 2**64. */
static int dk__keyset_arg(dk_py_state *s, const char *fn, PyObject *v, dk_keyset *out)
{
    if (!PyLong_Check(v) || PyBool_Check(v)) {
        dk_py_raise_fmt(s, DK_ETYPE, "%s(): keys must be an int bit mask (1 << key), got %s", fn, Py_TYPE(v)->tp_name);
        return -1;
    }
    unsigned long long ks = PyLong_AsUnsignedLongLong(v);
    if (ks == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        dk_py_raise_fmt(s, DK_EINVAL, "%s(): keys must be a bit mask in [0, 2**64)", fn);
        return -1;
    }
    *out = (dk_keyset)ks;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Ops                                                                                        */

static PyObject *dk__op_names(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    if (dk__check_nargs(DK__STATE(m), "op_names", n, 0) < 0) return NULL;
    int count = dk_op_count();
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
    for (int i = 0; i < count; i++) {
        const dk_op *op = dk_op_at(i);
        if (!op || !op->name) continue; /* a hand-made op without a name (refresh_ops warns) */
        PyObject *name = PyUnicode_FromString(op->name);
        if (!name || PyList_Append(list, name) < 0) {
            Py_XDECREF(name);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(name);
    }
    return list;
}

static PyObject *dk__schema(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    const dk_op *op = dk__op_arg(DK__STATE(m), "schema", args, n);
    return op ? PyUnicode_FromString(dk_op_schema(op)) : NULL;
}

static PyObject *dk__table(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    const dk_op *op = dk__op_arg(DK__STATE(m), "table", args, n);
    if (!op) return NULL;
    dk_table_entry e[DK_NUM_KEYS];
    int count = dk_op_table(op, e, DK_NUM_KEYS);
    if (count > DK_NUM_KEYS) count = DK_NUM_KEYS; /* one entry per key at most */
    PyObject *list = PyList_New(count);
    if (!list) return NULL;
    for (int i = 0; i < count; i++) {
        const char *kernel = e[i].provenance != DK_PROV_MISSING ? e[i].kernel_name : NULL;
        PyObject *row = Py_BuildValue("(sszO)", dk_key_name(e[i].key), dk_provenance_name(e[i].provenance), kernel,
                                      e[i].boxed ? Py_True : Py_False);
        if (!row) goto fail;
        PyList_SET_ITEM(list, i, row);
    }
    return list;
fail:
    Py_DECREF(list);
    return NULL;
}

static PyObject *dk__dump(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    const dk_op *op = dk__op_arg(s, "dump", args, n);
    if (!op) return NULL;
    char *text = dk_op_dump(op);
    if (!text) return dk_py_raise(s, DK_ENOMEM);
    PyObject *r = PyUnicode_FromString(text);
    dk_free(text);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* Keys and the thread-local sets                                                             */

static PyObject *dk__key(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    if (dk__check_nargs(s, "key", n, 1) < 0) return NULL;
    const char *name = dk__name_arg(s, "key", "key", args[0]);
    if (!name) return NULL;
    dk_key k;
    /* The core says DK_ENOENT; an unknown name is a bad argument, so ValueError, not a file error. */
    if (dk_key_lookup(name, &k) != DK_OK) return dk_py_raise(s, DK_EINVAL);
    return PyLong_FromLong(k);
}

/* An int argument in [lo, hi), or -1 with an exception set: DkitTypeError for anything but an int
 * (bools included), `range` for one outside the bounds (an int beyond a C long is as much out of
 * range as any other). */
static int dk__int_arg(dk_py_state *s, const char *fn, const char *what, PyObject *v, long lo, long hi, dk_status range,
                       long *out)
{
    if (!PyLong_Check(v) || PyBool_Check(v)) {
        dk_py_raise_fmt(s, DK_ETYPE, "%s(): the %s must be an int, got %s", fn, what, Py_TYPE(v)->tp_name);
        return -1;
    }
    int overflow = 0;
    long x = PyLong_AsLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (overflow || x < lo || x >= hi) {
        dk_py_raise_fmt(s, range, "%s(): %s %R is outside [%ld, %ld)", fn, what, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static PyObject *dk__key_name(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    long k;
    if (dk__check_nargs(s, "key_name", n, 1) < 0 ||
        dk__int_arg(s, "key_name", "key", args[0], 0, DK_NUM_KEYS, DK_EINDEX, &k) < 0)
        return NULL;
    return PyUnicode_FromString(dk_key_name((dk_key)k));
}

static PyObject *dk__tls_token(dk_tls_state st)
{
    return Py_BuildValue("(KK)", (unsigned long long)st.included, (unsigned long long)st.excluded);
}

static PyObject *dk__tls_push_include(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    dk_keyset ks;
    if (dk__check_nargs(s, "tls_push_include", n, 1) < 0 || dk__keyset_arg(s, "tls_push_include", args[0], &ks) < 0)
        return NULL;
    return dk__tls_token(dk_tls_push_include(ks));
}

static PyObject *dk__tls_push_exclude(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    dk_keyset ks;
    if (dk__check_nargs(s, "tls_push_exclude", n, 1) < 0 || dk__keyset_arg(s, "tls_push_exclude", args[0], &ks) < 0)
        return NULL;
    return dk__tls_token(dk_tls_push_exclude(ks));
}

static PyObject *dk__tls_pop(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    if (dk__check_nargs(s, "tls_pop", n, 1) < 0) return NULL;
    PyObject *tok = args[0];
    if (!PyTuple_Check(tok) || PyTuple_GET_SIZE(tok) != 2)
        return dk_py_raise_fmt(s, DK_ETYPE, "tls_pop(): expects the token a tls_push_* returned, got %s",
                               Py_TYPE(tok)->tp_name);
    dk_tls_state st;
    if (dk__keyset_arg(s, "tls_pop", PyTuple_GET_ITEM(tok, 0), &st.included) < 0 ||
        dk__keyset_arg(s, "tls_pop", PyTuple_GET_ITEM(tok, 1), &st.excluded) < 0)
        return NULL;
    dk_tls_pop(st);
    Py_RETURN_NONE;
}

static PyObject *dk__tls_get(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    if (dk__check_nargs(DK__STATE(m), "tls_get", n, 0) < 0) return NULL;
    return dk__tls_token(dk_tls_get());
}

/* Note [Scopes that end out of order] (dk_tls.h): the context managers' way in. */
static PyObject *dk__tls_scope_enter(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    dk_keyset inc, exc;
    if (dk__check_nargs(s, "tls_scope_enter", n, 2) < 0 || dk__keyset_arg(s, "tls_scope_enter", args[0], &inc) < 0 ||
        dk__keyset_arg(s, "tls_scope_enter", args[1], &exc) < 0)
        return NULL;
    dk_tls_scope scope;
    dk_status st = dk_tls_scope_enter(inc, exc, &scope);
    if (st != DK_OK) return dk_py_raise(s, st);
    return PyLong_FromUnsignedLongLong(scope);
}

static PyObject *dk__tls_scope_exit(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    if (dk__check_nargs(s, "tls_scope_exit", n, 1) < 0) return NULL;
    if (!PyLong_CheckExact(args[0]))
        return dk_py_raise_fmt(s, DK_ETYPE, "tls_scope_exit(): expects the token tls_scope_enter returned, got %s",
                               Py_TYPE(args[0])->tp_name);
    unsigned long long scope = PyLong_AsUnsignedLongLong(args[0]);
    if (scope == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    dk_status st = dk_tls_scope_exit((dk_tls_scope)scope);
    if (st != DK_OK) return dk_py_raise(s, st);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------------------ */
/* Profile                                                                                    */

static PyObject *dk__profile_rows(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    if (dk__check_nargs(s, "profile_rows", n, 0) < 0) return NULL;
    /* Rows can appear between the two calls (other threads); the second call is bounded. */
    int count = dk_profile_rows(NULL, 0) + 8;
    dk_profile_row *rows = PyMem_Calloc((size_t)count, sizeof *rows);
    if (!rows) return PyErr_NoMemory();
    int got = dk_profile_rows(rows, count);
    if (got > count) got = count;
    /* calls the CPU fallback served are rows of their own, "<backend> (cpu copy)" */
    PyObject *list = PyList_New(0);
    if (!list) goto done;
    for (int i = 0; i < got; i++) {
        uint64_t fc = 0, fns = 0, c = rows[i].count, ns = rows[i].total_ns;
        (void)dk_profile_get_fallback(rows[i].op, rows[i].backend, &fc, &fns);
        if (fc > c) fc = c, fns = ns; /* read apart: calls may land between the reads */
        char label[96];
        snprintf(label, sizeof label, "%s (cpu copy)", dk_key_name(rows[i].backend));
        for (int part = 0; part < 2; part++) {
            const uint64_t pc = part ? fc : c - fc, pns = part ? fns : ns - fns;
            if (!pc) continue;
            PyObject *row = Py_BuildValue("(ssKK)", rows[i].op->name, part ? label : dk_key_name(rows[i].backend),
                                          (unsigned long long)pc, (unsigned long long)pns);
            if (!row || PyList_Append(list, row) < 0) {
                Py_XDECREF(row);
                Py_CLEAR(list);
                goto done;
            }
            Py_DECREF(row);
        }
    }
done:
    PyMem_Free(rows);
    return list;
}

static PyObject *dk__profile_reset(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    if (dk__check_nargs(DK__STATE(m), "profile_reset", n, 0) < 0) return NULL;
    dk_profile_reset();
    Py_RETURN_NONE;
}

static PyObject *dk__profile_format(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    if (dk__check_nargs(s, "profile_format", n, 0) < 0) return NULL;
    char *text = dk_profile_format();
    if (!text) return dk_py_raise(s, DK_ENOMEM);
    PyObject *r = PyUnicode_FromString(text);
    dk_free(text);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* Backends, tracing, configuration                                                           */

static PyObject *dk__backend_names(void)
{
    int count = dk_backend_count();
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
    for (int i = 0; i < count; i++) {
        dk_backend_info b = dk_backend_at(i);
        if (!b.name) continue;
        PyObject *item = PyUnicode_FromString(b.name);
        if (!item || PyList_Append(list, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(item);
    }
    return list;
}

/* (name, path, key, available, reason, device_count) of one backend. Availability is asked of
 * its backend object now (a library that registered none is taken to be available, with an
 * unknown device count: None). */
static PyObject *dk__backend_row(const dk_backend_info *b)
{
    const dk_backend *o = b->backend;
    char why[256] = "";
    dk_status st = DK_OK;
    int devices = -1;
    if (o) {
        if (o->available) st = o->available(o->ctx, why, sizeof why);
        devices = st ? 0 : o->device_count ? o->device_count(o->ctx) : 1;
        if (st && !why[0]) snprintf(why, sizeof why, "%s", dk_status_name(st));
    }
    PyObject *ndev = devices < 0 ? Py_NewRef(Py_None) : PyLong_FromLong(devices);
    if (!ndev) return NULL;
    return Py_BuildValue("(szzOzN)", b->name, b->path, b->key != DK_KEY_UNDEFINED ? dk_key_name(b->key) : NULL,
                         st ? Py_False : Py_True, st ? why : NULL, ndev);
}

static PyObject *dk__backends(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    if (dk__check_nargs(DK__STATE(m), "backends", n, 0) < 0) return NULL;
    int count = dk_backend_count();
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
    for (int i = 0; i < count; i++) {
        dk_backend_info b = dk_backend_at(i);
        if (!b.name) continue;
        PyObject *row = dk__backend_row(&b);
        if (!row || PyList_Append(list, row) < 0) {
            Py_XDECREF(row);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(row);
    }
    return list;
}

static PyObject *dk__load_backend(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    if (n != 1 && n != 2)
        return dk_py_raise_fmt(s, DK_ETYPE, "load_backend(path, origin=None) takes 1 or 2 arguments, got %zd", n);
    const char *origin = "dkit.load_backend";
    if (n == 2 && args[1] != Py_None) {
        if (!PyUnicode_Check(args[1])) return dk_py_raise_fmt(s, DK_ETYPE, "load_backend: origin must be a str");
        if (!(origin = PyUnicode_AsUTF8(args[1]))) return NULL;
    }
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(args[0], &bytes)) return NULL; /* str, bytes or os.PathLike */
    dk_status st;
    const char *path = PyBytes_AS_STRING(bytes);
    /* A backend's entry point may take a while (device discovery) and never calls Python. */
    Py_BEGIN_ALLOW_THREADS
    st = dk_load_backend(path);
    Py_END_ALLOW_THREADS
    if (st != DK_OK) {
        Py_DECREF(bytes);
        return dk_py_raise(s, st);
    }
    /* a library loaded before (by DKIT_BACKENDS, say) keeps the origin it had */
    const int noted = dk_py_note_backend_origin(s, PyBytes_AS_STRING(bytes), origin, 0);
    Py_DECREF(bytes);
    if (noted < 0) return NULL;
    /* A backend library may define new ops as well as kernels: give them callables. */
    if (dk_py_ops_refresh(s) < 0) return NULL;
    Py_RETURN_NONE;
}

/* _backend_failed(path, origin, reason): a backend that could not be loaded, for dkit.backends()
 * (dkit/_entry_points.py reports the packages' backends that fail this way). */
static PyObject *dk___backend_failed(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    if (dk__check_nargs(s, "_backend_failed", n, 3) < 0) return NULL;
    for (int i = 0; i < 3; i++)
        if (!PyUnicode_Check(args[i]))
            return dk_py_raise_fmt(s, DK_ETYPE, "_backend_failed(path, origin, reason): str");
    PyObject *row = PyTuple_Pack(3, args[0], args[1], args[2]);
    if (!row) return NULL;
    const int rc = PyList_Append(s->backend_failures, row);
    Py_DECREF(row);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

/* Note [A failing backend never breaks the import] in dk_pybackends_at_import.c */
static PyObject *dk__backend_origins(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    if (dk__check_nargs(DK__STATE(m), "backend_origins", n, 0) < 0) return NULL;
    return PyDict_Copy(DK__STATE(m)->backend_origins);
}

static PyObject *dk__backend_failures(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    if (dk__check_nargs(DK__STATE(m), "backend_failures", n, 0) < 0) return NULL;
    return PyList_GetSlice(DK__STATE(m)->backend_failures, 0, PY_SSIZE_T_MAX);
}

static PyObject *dk__set_trace(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    if (dk__check_nargs(s, "set_trace", n, 1) < 0) return NULL;
    int on = PyObject_IsTrue(args[0]);
    if (on < 0) return NULL;
    dk_dispatch_set_trace(on != 0);
    Py_RETURN_NONE;
}

static PyObject *dk___torch_reader(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    if (n > 1) {
        (void)dk__check_nargs(s, "_torch_reader", n, 1); /* raises: too many arguments */
        return NULL;
    }
    int on = -1;
    if (n == 1 && args[0] != Py_None && (on = PyObject_IsTrue(args[0])) < 0) return NULL;
    int state = dk_py_torch_reader_use(s, on);
    if (state < 0) Py_RETURN_NONE;
    return PyBool_FromLong(state);
}

/* set_deterministic(on) -> previous: Note [Deterministic kernels] in dk_determinism.h. */
static PyObject *dk__set_deterministic(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    if (dk__check_nargs(DK__STATE(m), "set_deterministic", n, 1) < 0) return NULL;
    const int on = PyObject_IsTrue(args[0]);
    if (on < 0) return NULL;
    return PyBool_FromLong(dk_set_deterministic(on != 0));
}

static PyObject *dk__set_num_threads(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    long v;
    if (dk__check_nargs(s, "set_num_threads", n, 1) < 0 ||
        dk__int_arg(s, "set_num_threads", "thread count", args[0], INT_MIN, INT_MAX, DK_EINVAL, &v) < 0)
        return NULL;
    dk_status st = dk_set_num_threads((int)v); /* the core refuses a negative count */
    if (st != DK_OK) return dk_py_raise(s, st);
    Py_RETURN_NONE;
}

/* set_current_stream(device_type, device_id, stream) -> previous: Note [The current stream] in
 * dk_backend.h, for the calling thread; stream 0 is the device's default stream. The stream is
 * a pointer value (cudaStream_t, hipStream_t), as DLPack passes streams. */
static PyObject *dk__set_current_stream(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    long type, id;
    if (dk__check_nargs(s, "set_current_stream", n, 3) < 0 ||
        dk__int_arg(s, "set_current_stream", "device type", args[0], 1, INT32_MAX, DK_EINVAL, &type) < 0 ||
        dk__int_arg(s, "set_current_stream", "device id", args[1], 0, INT32_MAX, DK_EINVAL, &id) < 0)
        return NULL;
    if (!PyLong_Check(args[2]) || PyBool_Check(args[2]))
        return dk_py_raise_fmt(s, DK_ETYPE, "set_current_stream(): the stream must be an int (a pointer value), got %s",
                               Py_TYPE(args[2])->tp_name);
    void *stream = PyLong_AsVoidPtr(args[2]); /* OverflowError for a negative value or one too wide */
    if (!stream && PyErr_Occurred()) return NULL;
    void *previous = NULL;
    const DLDevice device = {(DLDeviceType)type, (int32_t)id};
    dk_status st = dk_set_current_stream(device, stream, &previous);
    if (st != DK_OK) return dk_py_raise(s, st);
    return PyLong_FromVoidPtr(previous);
}

/* set_stream_getter(type, fn or None): Note [The consumer's stream] in dk_pystream.c. */
static PyObject *dk__set_stream_getter(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    if (dk__check_nargs(s, "set_stream_getter", n, 2) < 0) return NULL;
    if (!PyType_Check(args[0]))
        return dk_py_raise_fmt(s, DK_ETYPE, "set_stream_getter(): expects a type, got %s", Py_TYPE(args[0])->tp_name);
    if (args[1] != Py_None && !PyCallable_Check(args[1]))
        return dk_py_raise_fmt(s, DK_ETYPE, "set_stream_getter(): the getter must be callable or None");
    if (!s->stream_getters && !(s->stream_getters = PyDict_New())) return NULL;
    int rc = args[1] == Py_None
                 ? (PyDict_Contains(s->stream_getters, args[0]) == 1 ? PyDict_DelItem(s->stream_getters, args[0]) : 0)
                 : PyDict_SetItem(s->stream_getters, args[0], args[1]);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *dk__get_num_threads(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    if (dk__check_nargs(DK__STATE(m), "get_num_threads", n, 0) < 0) return NULL;
    return PyLong_FromLong(dk_get_num_threads());
}

static PyObject *dk__refresh_ops(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = DK__STATE(m);
    if (dk__check_nargs(s, "refresh_ops", n, 0) < 0) return NULL;
    if (dk_py_ops_refresh(s) < 0) return NULL;
    Py_RETURN_NONE;
}

static int dk__dict_set(PyObject *d, const char *key, PyObject *v)
{
    if (!v) return -1;
    int rc = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return rc;
}

#ifdef _OPENMP
/* libdkit and this module share the process's one libgomp, so this is the kernels' count. */
#define DK__OPENMP Py_NewRef(Py_True)
#define DK__THREADS PyLong_FromLong(omp_get_max_threads())
#else
#define DK__OPENMP Py_NewRef(Py_False)
#define DK__THREADS PyLong_FromLong(1)
#endif
#ifdef __clang__
#define DK__COMPILER "clang " __VERSION__
#elif defined(__GNUC__)
#define DK__COMPILER "gcc " __VERSION__
#else
#define DK__COMPILER "unknown"
#endif

static PyObject *dk__config(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    if (dk__check_nargs(DK__STATE(m), "config", n, 0) < 0) return NULL;
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    /* Each value is made where it is stored (dk__dict_set takes it, also on failure): made
     * beforehand, a value would leak when an earlier item fails and || skips the rest. */
    if (dk__dict_set(d, "version", PyUnicode_FromString(DK_VERSION_STRING)) < 0 ||
        dk__dict_set(d, "abi", PyLong_FromUnsignedLong(DK_ABI_VERSION)) < 0 ||
        dk__dict_set(d, "compiler", PyUnicode_FromString(DK__COMPILER)) < 0 ||
        dk__dict_set(d, "openmp", DK__OPENMP) < 0 || dk__dict_set(d, "openmp_max_threads", DK__THREADS) < 0 ||
        dk__dict_set(d, "num_threads", PyLong_FromLong(dk_get_num_threads())) < 0 ||
        dk__dict_set(d, "backends", dk__backend_names()) < 0 ||
        dk__dict_set(d, "dlpack_version", Py_BuildValue("(ii)", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
#undef DK__OPENMP
#undef DK__THREADS
#undef DK__COMPILER
    return d;
}

/* A braced initializer as a macro body, which clang-format breaks apart. */
// clang-format off
#define DK__FN(name, doc) {#name, DK_PY_FASTCALL(dk__##name), METH_FASTCALL, doc}
// clang-format on
PyMethodDef dk_py_introspect_methods[] = {
    DK__FN(op_names, "op_names() -> list[str]: every registered op, in registration order."),
    DK__FN(schema, "schema(name) -> str: the op's schema; DkitValueError for an unknown op."),
    DK__FN(table, "table(name) -> list of (key, provenance, kernel or None, boxed), highest priority first."),
    DK__FN(dump, "dump(name) -> str: the op's schema and dispatch table as text."),
    DK__FN(key, "key(name) -> int: the key with that name ('cpu', 'Profile', a vendor's); DkitValueError if none."),
    DK__FN(key_name, "key_name(key) -> str: 'cpu', 'Profile', a vendor's name, or 'key<N>'."),
    DK__FN(tls_push_include, "tls_push_include(keys) -> token: add keys (a bit mask) to this thread's included set."),
    DK__FN(tls_push_exclude, "tls_push_exclude(keys) -> token: add keys (a bit mask) to this thread's excluded set."),
    DK__FN(tls_pop, "tls_pop(token): restore the thread's sets to what they were before the push."),
    DK__FN(tls_scope_enter, "tls_scope_enter(include, exclude) -> token: add keys (bit masks) to this thread's sets "
                            "until tls_scope_exit(token), which may come in any order, on any thread."),
    DK__FN(tls_scope_exit, "tls_scope_exit(token): end a scope (once)."),
    DK__FN(tls_get, "tls_get() -> (included, excluded): this thread's key sets as bit masks."),
    DK__FN(profile_rows, "profile_rows() -> list of (op, backend, count, total_ns)."),
    DK__FN(profile_reset, "profile_reset(): zero every profile counter."),
    DK__FN(profile_format, "profile_format() -> str: the profile as a table."),
    DK__FN(backends, "backends() -> list of (name, path, key, available, reason, device_count): built-in and loaded "
                     "backends; reason says why one is unavailable."),
    DK__FN(load_backend, "load_backend(path, origin=None): dlopen a backend library and run its entry point; "
                         "origin says how it came to be loaded (dkit.backends()), 'dkit.load_backend' by default."),
    DK__FN(_backend_failed, "_backend_failed(path, origin, reason): record a backend that failed to load."),
    DK__FN(backend_origins, "backend_origins() -> dict: library path -> how it was loaded ('shipped with dkit', "
                            "'DKIT_BACKENDS', 'dkit.load_backend')."),
    DK__FN(backend_failures, "backend_failures() -> list of (path, origin, reason): the libraries that failed to "
                             "load when _C was imported, each skipped."),
    DK__FN(set_trace, "set_trace(on): print every dispatch decision to stderr."),
    DK__FN(_torch_reader, "_torch_reader(on=None) -> bool or None: whether _C reads torch tensors through "
                          "dkit._torch_reader; on=True/False turns that on/off (for tests); None if unavailable."),
    {"_shape_only", DK_PY_FASTCALL(dk_py_shape_only), METH_FASTCALL,
     "_shape_only(on=None) -> bool: whether this thread's op calls run no kernel (Note [Shape-only calls]); "
     "on=True/False sets it and the previous value is returned."},
    DK__FN(set_deterministic, "set_deterministic(on) -> previous: whether this thread's calls ask for deterministic "
                              "kernels (a GPU backward without atomics: Note [Deterministic kernels])."),
    DK__FN(set_num_threads,
           "set_num_threads(n): CPU kernels use up to n threads, from any thread (0: OpenMP's default)."),
    DK__FN(get_num_threads, "get_num_threads() -> int: the threads a large CPU kernel call would use now."),
    DK__FN(set_stream_getter, "set_stream_getter(type, fn): fn(device_id) -> the current stream of the framework "
                              "whose tensors are `type`, used when dkit has none set (None: forget it)."),
    DK__FN(set_current_stream, "set_current_stream(device_type, device_id, stream) -> previous: this thread's current "
                               "stream for a device (a pointer value; 0: the default stream)."),
    DK__FN(refresh_ops, "refresh_ops(): add callables to _C.ops for ops registered since import."),
    DK__FN(
        config,
        "config() -> dict: version, abi, compiler, openmp, openmp_max_threads, num_threads, backends, dlpack_version."),
    {NULL, NULL, 0, NULL},
};
#undef DK__FN

int dk_py_introspect_init(PyObject *module, dk_py_state *s)
{
    (void)s;
    static const struct {
        const char *name;
        long value;
    } ints[] = {
        {"KEY_UNDEFINED", DK_KEY_UNDEFINED},
        {"KEY_CPU", DK_KEY_CPU},
        {"KEY_CUDA", DK_KEY_CUDA},
        {"KEY_HIP", DK_KEY_HIP},
        {"KEY_VENDOR_FIRST", DK_KEY_VENDOR_FIRST},
        {"KEY_VENDOR_LAST", DK_KEY_VENDOR_LAST},
        {"KEY_FUNC_FIRST", DK_KEY_FUNC_FIRST},
        {"KEY_FUNC_LAST", DK_KEY_FUNC_LAST},
        {"KEY_PROFILE", DK_KEY_PROFILE},
        {"NUM_KEYS", DK_NUM_KEYS},
        {"ABI_VERSION", (long)DK_ABI_VERSION},
    };
    for (size_t i = 0; i < DK_COUNTOF(ints); i++)
        if (PyModule_AddIntConstant(module, ints[i].name, ints[i].value) < 0) return -1;
    return PyModule_AddStringConstant(module, "__version__", DK_VERSION_STRING);
}

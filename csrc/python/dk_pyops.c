/*
 * dk_pyops.c — the op callables of dkit._C.ops, generated from the registered schemas.
 *
 * There is no per-op binding code. At import, every op the core registered (dk_op_count /
 * dk_op_at) gets one dkit._C.Op object that holds its dk_op and its argument names. A call reads
 * the Python arguments in schema order (keywords by schema name also work), turns each into a
 * dk_value by the argument's dk_arg_kind, and makes one boxed call with the GIL released.
 *
 * Note [The call path]
 * This is the path under every dkit.ops.* call from Python, so it avoids all per-call
 * allocation in the common case: vectorcall (no argument tuple or dict), the dk_stack and the
 * DLPack owners live on the C stack, positional calls use the caller's argument array as is,
 * keyword names are matched by pointer first (they are interned on both sides), and int lists
 * use an on-stack buffer unless they are long. Arguments are converted in the order of Note
 * [Conversion order] (dk_pydlpack.h). The GIL is released only around dk_op_call_boxed, after
 * every Python object has been converted, and re-taken before any deleter runs (Note [DLPack
 * ownership] in dk_pydlpack.c).
 */
#include "dk_py.h" /* first: Python.h must precede every system header (CPython's rule) */

#include <string.h>

#include <structmember.h> /* PyMemberDef, T_OBJECT (in Python.h itself only from 3.12) */
#include "dk_pydlpack.h"

typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    const dk_op *op;
    PyObject *name;      /* str: op->name */
    PyObject *schema;    /* str: dk_op_schema(op) */
    PyObject *argnames;  /* tuple of interned str, schema order */
    PyObject *args_info; /* tuple of (name, kind, out) */
} dk_py_op;

/* ------------------------------------------------------------------------------------------ */
/* Argument binding                                                                           */

static int dk__argname_index(const dk_py_op *self, PyObject *key)
{
    const dk_op *op = self->op;
    for (int i = 0; i < op->nargs; i++)
        if (PyTuple_GET_ITEM(self->argnames, i) == key) return i;
    for (int i = 0; i < op->nargs; i++) {
        int eq = PyUnicode_Compare(PyTuple_GET_ITEM(self->argnames, i), key);
        if (eq == 0) return i;
        if (eq == -1 && PyErr_Occurred()) return -2;
    }
    return -1;
}

/* Places positional and keyword arguments by schema position; missing optional tensors are
 * None. `bound` has op->nargs entries. */
static int dk__bind(dk_py_state *s, const dk_py_op *self, PyObject *const *args, Py_ssize_t npos, PyObject *kwnames,
                    PyObject **bound)
{
    const dk_op *op = self->op;
    if (npos > op->nargs) {
        dk_py_raise_fmt(s, DK_ETYPE, "%s() takes %d arguments but %zd were given", op->name, op->nargs, npos);
        return -1;
    }
    for (int i = 0; i < op->nargs; i++) bound[i] = i < npos ? args[i] : NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int i = dk__argname_index(self, key);
        if (i == -2) return -1;
        if (i < 0) {
            dk_py_raise_fmt(s, DK_ETYPE, "%s() got an unexpected keyword argument '%U'", op->name, key);
            return -1;
        }
        if (bound[i]) {
            dk_py_raise_fmt(s, DK_ETYPE, "%s() got multiple values for argument '%s'", op->name, op->args[i].name);
            return -1;
        }
        bound[i] = args[npos + k];
    }
    for (int i = 0; i < op->nargs; i++) {
        if (bound[i]) continue;
        if (op->args[i].kind == DK_ARG_OPT_TENSOR) {
            bound[i] = Py_None;
            continue;
        }
        dk_py_raise_fmt(s, DK_ETYPE, "%s() missing required argument '%s' (%s)", op->name, op->args[i].name,
                        dk_arg_kind_name(op->args[i].kind));
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Conversion                                                                                 */

/* Storage for int[] arguments: a stack buffer, then heap blocks, all freed after the call. */
#define DK__LIST_INLINE 64
typedef struct {
    int64_t inline_buf[DK__LIST_INLINE];
    Py_ssize_t used;
    int nheap;
    int64_t *heap[DK_STACK_MAX];
} dk__lists;

static int64_t *dk__lists_alloc(dk__lists *l, Py_ssize_t n)
{
    if (n <= DK__LIST_INLINE - l->used) {
        int64_t *p = l->inline_buf + l->used;
        l->used += n;
        return p;
    }
    int64_t *p = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *p);
    if (!p) {
        PyErr_NoMemory();
        return NULL;
    }
    l->heap[l->nheap++] = p; /* one list per argument at most: nheap <= DK_STACK_MAX */
    return p;
}

static void dk__lists_free(dk__lists *l)
{
    for (int i = 0; i < l->nheap; i++) PyMem_Free(l->heap[i]);
    l->nheap = 0;
}

static int dk__type_error(dk_py_state *s, const dk_op *op, const dk_arg_info *a, PyObject *v)
{
    dk_py_raise_fmt(s, DK_ETYPE, "%s: parameter '%s' must be %s, got %s", op->name, a->name, dk_arg_kind_name(a->kind),
                    Py_TYPE(v)->tp_name);
    return -1;
}

/* An __index__ or __float__ that failed (a 0-d float tensor's __index__, a 2-element tensor's
 * __float__: torch's TypeError or ValueError, which name no parameter) is raised again as a
 * DkitTypeError naming the op and the parameter, from the original. Returns -1. */
static int dk__conversion_error(dk_py_state *s, const dk_op *op, const dk_arg_info *a, PyObject *v)
{
    PyObject *cause;
    if (!dk_py_fetch_foreign(s, &cause)) return -1;
    dk_py_raise_fmt(s, DK_ETYPE, "%s: parameter '%s' must be %s, got %s, which cannot be converted: %S", op->name,
                    a->name, dk_arg_kind_name(a->kind), Py_TYPE(v)->tp_name, cause);
    dk_py_set_cause(cause);
    return -1;
}

/* An int: Python ints and anything with __index__ (numpy integers), but not bool — a bool
 * where an int is expected is almost always an argument in the wrong place. */
static int dk__to_int(dk_py_state *s, const dk_op *op, const dk_arg_info *a, PyObject *v, int64_t *out)
{
    if (PyBool_Check(v) || !PyIndex_Check(v)) return dk__type_error(s, op, a, v);
    int overflow = 0;
    long long x;
    if (PyLong_CheckExact(v)) {
        x = PyLong_AsLongLongAndOverflow(v, &overflow);
    } else {
        PyObject *i = PyNumber_Index(v);
        if (!i) return dk__conversion_error(s, op, a, v);
        x = PyLong_AsLongLongAndOverflow(i, &overflow);
        Py_DECREF(i);
    }
    if (overflow) {
        dk_py_raise_fmt(s, DK_EINVAL, "%s: parameter '%s' does not fit in a 64-bit int", op->name, a->name);
        return -1;
    }
    if (x == -1 && PyErr_Occurred()) return -1;
    *out = (int64_t)x;
    return 0;
}

/* A float: floats, ints, and anything with __float__ (numpy scalars); not bool, not str. */
static int dk__to_float(dk_py_state *s, const dk_op *op, const dk_arg_info *a, PyObject *v, double *out)
{
    if (PyFloat_CheckExact(v)) {
        *out = PyFloat_AS_DOUBLE(v);
        return 0;
    }
    if (PyBool_Check(v)) return dk__type_error(s, op, a, v);
    PyNumberMethods *nb = Py_TYPE(v)->tp_as_number;
    if (!PyFloat_Check(v) && !PyLong_Check(v) && !(nb && (nb->nb_float || nb->nb_index)))
        return dk__type_error(s, op, a, v);
    double x = PyFloat_AsDouble(v);
    if (x == -1.0 && PyErr_Occurred()) {
        /* An int beyond a double's range: a bad value, reported like an int beyond int64. */
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return dk__conversion_error(s, op, a, v);
        PyErr_Clear();
        dk_py_raise_fmt(s, DK_EINVAL, "%s: parameter '%s' does not fit in a double", op->name, a->name);
        return -1;
    }
    *out = x;
    return 0;
}

static int dk__to_int_list(dk_py_state *s, const dk_op *op, const dk_arg_info *a, PyObject *v, dk__lists *lists,
                           dk_int_list *out)
{
    if (PyUnicode_Check(v) || PyBytes_Check(v) || !PySequence_Check(v)) return dk__type_error(s, op, a, v);
    PyObject *seq = PySequence_Fast(v, "");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int rc = -1;
    int64_t *data = dk__lists_alloc(lists, n);
    if (!data) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* `seq` is the caller's list itself when `v` is a list, and an item's __index__ is
         * Python code that may change that list (clear it, grow it: its item array is then
         * freed). So the size is checked and the item re-read on every step, never through a
         * saved PySequence_Fast_ITEMS pointer, and the item is held while it converts. */
        if (PySequence_Fast_GET_SIZE(seq) != n) break;
        PyObject *item = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));
        int bad = PyBool_Check(item) || !PyIndex_Check(item);
        if (bad)
            dk_py_raise_fmt(s, DK_ETYPE, "%s: parameter '%s' must be a sequence of ints; item %zd is %s", op->name,
                            a->name, i, Py_TYPE(item)->tp_name);
        int err = bad || dk__to_int(s, op, a, item, &data[i]) < 0;
        Py_DECREF(item);
        if (err) goto done;
    }
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        dk_py_raise_fmt(s, DK_ERUNTIME, "%s: parameter '%s' changed size while it was read", op->name, a->name);
        goto done;
    }
    out->data = data;
    out->size = n;
    rc = 0;
done:
    Py_DECREF(seq);
    return rc;
}

static int dk__to_str(dk_py_state *s, const dk_op *op, const dk_arg_info *a, PyObject *v, const char **out)
{
    if (!PyUnicode_Check(v)) return dk__type_error(s, op, a, v);
    Py_ssize_t n;
    /* Borrowed from the str object, which the caller keeps alive for the whole call. */
    const char *u = PyUnicode_AsUTF8AndSize(v, &n);
    if (!u) return -1;
    if ((size_t)n != strlen(u)) {
        dk_py_raise_fmt(s, DK_EINVAL, "%s: parameter '%s' contains a NUL character", op->name, a->name);
        return -1;
    }
    *out = u;
    return 0;
}

static bool dk__is_tensor_arg(const dk_arg_info *a) { return a->kind == DK_ARG_TENSOR || a->kind == DK_ARG_OPT_TENSOR; }

/* A non-tensor argument (pass 1 of Note [Conversion order]). */
static int dk__convert(dk_py_state *s, const dk_op *op, const dk_arg_info *a, PyObject *v, dk_value *out,
                       dk__lists *lists)
{
    switch (a->kind) {
    case DK_ARG_TENSOR:
    case DK_ARG_OPT_TENSOR: break; /* dk__convert_tensors */
    case DK_ARG_INT: out->tag = DK_TYPE_INT; return dk__to_int(s, op, a, v, &out->u.i);
    case DK_ARG_FLOAT: out->tag = DK_TYPE_FLOAT; return dk__to_float(s, op, a, v, &out->u.f);
    case DK_ARG_BOOL:
        /* True/False only: 0/1 or numpy bools are rejected rather than guessed at. */
        if (!PyBool_Check(v)) return dk__type_error(s, op, a, v);
        *out = dk_value_bool(v == Py_True);
        return 0;
    case DK_ARG_STR: out->tag = DK_TYPE_STR; return dk__to_str(s, op, a, v, &out->u.s);
    case DK_ARG_INT_LIST: out->tag = DK_TYPE_INT_LIST; return dk__to_int_list(s, op, a, v, lists, &out->u.il);
    }
    dk_py_raise_fmt(s, DK_ENOTIMPL, "%s: parameter '%s' has a kind this dkit._C does not know (%d)", op->name, a->name,
                    (int)a->kind);
    return -1;
}

/* The tensor arguments, in passes 2 and 3 of Note [Conversion order], and the check after them.
 * Returns 0, -1 with an exception set, or DK_PY_ABSTRACT when every tensor is a meta tensor (Note
 * [Meta tensors in the core's calls]): the call then runs no kernel. */
static int dk__convert_tensors(dk_py_state *s, const dk_op *op, PyObject *const *argv, dk_value *vals,
                               dk_py_owners *owners)
{
    int read = 0, risky = 0, abstract = -1, real = -1; /* the index of a meta tensor, of a tensor with memory */
    for (int pass = 2; pass <= 3; pass++) {
        for (int i = 0; i < op->nargs; i++) {
            const dk_arg_info *a = &op->args[i];
            if (!dk__is_tensor_arg(a)) continue;
            if (argv[i] == Py_None && a->kind == DK_ARG_OPT_TENSOR) {
                if (pass == 2) vals[i] = dk_value_none();
                continue;
            }
            if (dk_py_dlpack_reads_late(s, argv[i]) != (pass == 3)) continue;
            DLTensor *t;
            int ran_python = 0;
            const int rc = dk_py_dlpack_import(s, argv[i], a->out, op->name, a->name, owners, &t, &ran_python);
            if (rc < 0) return -1;
            if (rc == DK_PY_ABSTRACT) { /* the first of each kind is named */
                if (abstract < 0 || i < abstract) abstract = i;
                vals[i] = dk_value_none();
                continue;
            }
            risky |= ran_python && read > 0; /* Python code ran after a pointer was read */
            read++;
            if (real < 0 || i < real) real = i;
            vals[i] = dk_value_tensor(t);
        }
    }
    if (abstract >= 0) {
        if (real < 0) return DK_PY_ABSTRACT;
        dk_py_raise_fmt(s, DK_EINVAL,
                        "%s: parameter '%s' is a meta tensor (no memory) and parameter '%s' is not: a call takes "
                        "meta tensors only, or tensors with memory only",
                        op->name, op->args[abstract].name, op->args[real].name);
        return -1;
    }
    for (int i = 0; risky && i < op->nargs; i++)
        if (vals[i].tag == DK_TYPE_TENSOR &&
            dk_py_dlpack_recheck(s, argv[i], vals[i].u.t, op->name, op->args[i].name) < 0)
            return -1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The call (Note [The call path])                                                            */

/*
 * Note [Shape-only calls]
 * torch.compile asks every op of a graph for its results' shapes before anything runs: it calls
 * the op's "fake" implementation with FakeTensors, which have shapes, strides, dtypes and devices
 * but no memory. dkit's fake implementations are the ops' own Python functions (Note [dkit ops
 * under torch.compile] in dkit/_torch_library.py), which size and allocate every output as usual;
 * only the kernel must not run. While this thread's shape-only flag is set (_shape_only(True),
 * which those functions set around themselves), a call of any core op converts its non-tensor
 * arguments (so a bad int or str is still refused) and returns without reading a tensor or
 * running a kernel. The flag is per thread: an eager call on another thread runs as usual. One
 * thread-local read per call.
 */
static _Thread_local int dk__shape_only;

PyObject *dk_py_shape_only(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    (void)m;
    if (n > 1) {
        PyErr_SetString(PyExc_TypeError, "_shape_only(on=None) takes at most one argument");
        return NULL;
    }
    const int previous = dk__shape_only;
    if (n == 1 && args[0] != Py_None) {
        const int on = PyObject_IsTrue(args[0]);
        if (on < 0) return NULL;
        dk__shape_only = on;
    }
    return PyBool_FromLong(previous);
}

static PyObject *dk__op_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    dk_py_op *self = (dk_py_op *)callable;
    const dk_op *op = self->op;
    dk_py_state *s = PyType_GetModuleState(Py_TYPE(callable));
    Py_ssize_t npos = PyVectorcall_NARGS(nargsf);
    PyObject *bound[DK_STACK_MAX];
    PyObject *const *argv = args;
    if (kwnames || npos != op->nargs) {
        if (dk__bind(s, self, args, npos, kwnames, bound) < 0) return NULL;
        argv = bound;
    }

    PyObject *result = NULL;
    dk_stack stack;
    dk_py_owners owners;
    dk__lists lists;
    owners.n = owners.nviews = owners.nstreams = 0;
    lists.used = 0;
    lists.nheap = 0;
    /* Note [Conversion order] in dk_pydlpack.h: scalars first, then the tensors. */
    for (int i = 0; i < op->nargs; i++)
        if (!dk__is_tensor_arg(&op->args[i]) && dk__convert(s, op, &op->args[i], argv[i], &stack.v[i], &lists) < 0)
            goto cleanup;
    if (dk__shape_only) { /* Note [Shape-only calls] */
        result = Py_NewRef(Py_None);
        goto cleanup;
    }
    const int conv = dk__convert_tensors(s, op, argv, stack.v, &owners);
    if (conv < 0) goto cleanup;
    if (conv == DK_PY_ABSTRACT) { /* Note [Meta tensors in the core's calls] */
        result = Py_NewRef(Py_None);
        goto cleanup;
    }
    stack.size = op->nargs;

    dk_status st;
    dk_py_kernel_catch caught; /* Note [A Python kernel's exception reaches its Python caller] */
    /* A kernel that fails without a message (or sets it on another thread) must not be
     * reported with an earlier call's message: dk_py_raise then falls back to the status. */
    dk_clear_error();
    dk_py_kernel_catch_begin(&caught);
    Py_BEGIN_ALLOW_THREADS
    st = dk_op_call_boxed(op, &stack);
    Py_END_ALLOW_THREADS
    /* dk_last_error() is this OS thread's, and we are back on the thread that made the call. */
    if (dk_py_kernel_catch_end(&caught, s, st) < 0) goto cleanup;
    result = Py_NewRef(Py_None);
cleanup:
    dk_py_owners_release(&owners);
    dk__lists_free(&lists);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* The type                                                                                   */

static int dk__op_traverse(PyObject *o, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(o)); /* instances of heap types own a reference to their type */
    return 0;
}

static void dk__op_dealloc(PyObject *o)
{
    dk_py_op *self = (dk_py_op *)o;
    PyTypeObject *tp = Py_TYPE(o);
    PyObject_GC_UnTrack(o);
    Py_XDECREF(self->name);
    Py_XDECREF(self->schema);
    Py_XDECREF(self->argnames);
    Py_XDECREF(self->args_info);
    tp->tp_free(o);
    Py_DECREF(tp);
}

static PyObject *dk__op_repr(PyObject *o)
{
    dk_py_op *self = (dk_py_op *)o;
    return PyUnicode_FromFormat("<dkit op %U>", self->schema);
}

static PyMemberDef dk__op_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(dk_py_op, vectorcall), READONLY, NULL},
    {"__name__", T_OBJECT, offsetof(dk_py_op, name), READONLY, "the op's name"},
    {"__qualname__", T_OBJECT, offsetof(dk_py_op, name), READONLY, "the op's name"},
    {"__doc__", T_OBJECT, offsetof(dk_py_op, schema), READONLY, "the op's schema"},
    {"schema", T_OBJECT, offsetof(dk_py_op, schema), READONLY,
     "the op's schema, e.g. dkit::op(Tensor x, Tensor(a!) out, float s) -> ()"},
    {"arg_names", T_OBJECT, offsetof(dk_py_op, argnames), READONLY, "argument names in schema order"},
    {"args", T_OBJECT, offsetof(dk_py_op, args_info), READONLY,
     "(name, kind, written) per argument in schema order; kind is 'Tensor', 'Tensor?', 'int', 'float', 'bool', "
     "'str' or 'int[]'"},
    {NULL, 0, 0, 0, NULL},
};

/* One slot per line (clang-format would pack them into columns). */
// clang-format off
static PyType_Slot dk__op_slots[] = {
    {Py_tp_call, (void *)PyVectorcall_Call},
    {Py_tp_dealloc, (void *)dk__op_dealloc},
    {Py_tp_traverse, (void *)dk__op_traverse},
    {Py_tp_repr, (void *)dk__op_repr},
    {Py_tp_members, dk__op_members},
    {0, NULL},
};
// clang-format on

static PyType_Spec dk__op_spec = {
    .name = "dkit._C.Op",
    .basicsize = sizeof(dk_py_op),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = dk__op_slots,
};

/* Can the binding call this op? A dk_op made with DK_DEFINE_OP always can; one a backend built
 * by hand may not, and would otherwise overrun the call's fixed arrays (bound[], the dk_stack,
 * the owners: DK_STACK_MAX entries each) or dereference a NULL name. */
static const char *dk__op_unusable(const dk_op *op)
{
    if (!op->name) return "it has no name";
    if (op->nargs < 0 || op->nargs > DK_STACK_MAX) return "its argument count is outside [0, DK_STACK_MAX]";
    if (op->nargs > 0 && !op->args) return "it has no argument list";
    for (int i = 0; i < op->nargs; i++)
        if (!op->args[i].name) return "an argument has no name";
    return NULL;
}

static PyObject *dk__op_new(dk_py_state *s, const dk_op *op)
{
    dk_py_op *self = PyObject_GC_New(dk_py_op, s->op_type);
    if (!self) return NULL;
    self->vectorcall = dk__op_vectorcall;
    self->op = op;
    self->name = self->schema = self->argnames = self->args_info = NULL;
    PyObject_GC_Track((PyObject *)self);
    if (!(self->name = PyUnicode_InternFromString(op->name))) goto fail;
    if (!(self->schema = PyUnicode_FromString(dk_op_schema(op)))) goto fail;
    if (!(self->argnames = PyTuple_New(op->nargs))) goto fail;
    if (!(self->args_info = PyTuple_New(op->nargs))) goto fail;
    for (int i = 0; i < op->nargs; i++) {
        const dk_arg_info *a = &op->args[i];
        PyObject *n = PyUnicode_InternFromString(a->name); /* interned: keywords match by pointer */
        if (!n) goto fail;
        PyTuple_SET_ITEM(self->argnames, i, n);
        PyObject *info = Py_BuildValue("(OsO)", n, dk_arg_kind_name(a->kind), a->out ? Py_True : Py_False);
        if (!info) goto fail;
        PyTuple_SET_ITEM(self->args_info, i, info);
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

int dk_py_ops_refresh(dk_py_state *s)
{
    int n = dk_op_count();
    for (int i = 0; i < n; i++) {
        const dk_op *op = dk_op_at(i);
        if (!op) continue;
        const char *why = dk__op_unusable(op);
        if (why) {
            /* Skipped (the rest of the process may still use it from C), with a warning each
             * refresh; an error would make every later load_backend/refresh_ops fail. */
            if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "dkit: op #%d ('%s') has no Python callable: %s", i,
                                 op->name ? op->name : "(null)", why) < 0)
                return -1;
            continue;
        }
        PyObject *have = PyObject_GetAttrString(s->ops, op->name);
        if (have) {
            Py_DECREF(have);
            continue;
        }
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
        PyErr_Clear();
        PyObject *fn = dk__op_new(s, op);
        if (!fn) return -1;
        int rc = PyObject_SetAttrString(s->ops, op->name, fn);
        Py_DECREF(fn);
        if (rc < 0) return -1;
    }
    return 0;
}

int dk_py_ops_init(PyObject *module, dk_py_state *s)
{
    s->op_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &dk__op_spec, NULL);
    if (!s->op_type || PyModule_AddObjectRef(module, "Op", (PyObject *)s->op_type) < 0) return -1;
    /* A plain module object: attribute access is one dict lookup, dir() lists the ops. */
    s->ops = PyModule_New("dkit._C.ops");
    if (!s->ops) return -1;
    PyObject *doc = PyUnicode_FromString("One callable per op registered in dkit's core, named after the op.");
    if (!doc) return -1;
    int rc = PyObject_SetAttrString(s->ops, "__doc__", doc);
    Py_DECREF(doc);
    if (rc < 0) return -1;
    if (dk_py_ops_refresh(s) < 0) return -1;
    return PyModule_AddObjectRef(module, "ops", s->ops);
}

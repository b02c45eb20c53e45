/*
 * dk_pykernel.c — Python kernels: a Python function registered as the kernel of an op at a
 * device's dispatch key, behind one boxed trampoline (dkit.dispatch.kernel).
 *
 * Note [Python kernels]
 * dkit.dispatch.kernel("roi_align_forward", "cpu")(fn) registers, through dk_op_register, a
 * boxed kernel (dk__trampoline) whose context is a record holding fn, so that the dispatcher
 * treats it as any other kernel, for callers in C and in Python alike:
 *   - Precedence is the dispatcher's (Note [Slot precedence] in dk_dispatcher.c): the newest
 *     registration at (op, key) wins, with the dispatcher's "overrides" warning, and removing it
 *     restores the one below, in any order. A key above (Profile, a user's functionality layer)
 *     still runs first and reaches it by redispatch, or serves the call itself. Only backend
 *     keys (cpu, cuda, hip, a vendor's) take a Python kernel: it serves a device, as a C kernel
 *     at that key does; at a functionality key it could not pass a call on.
 *   - The call: the trampoline takes the GIL (PyGILState_Ensure, so a C caller on a thread
 *     Python never saw works too), passes the schema's arguments positionally, in schema order:
 *     tensors as KernelTensor views (Note [A Python kernel's tensors] in
 *     dk_pykernel_tensor.c), None for an absent optional tensor, ints, floats, bools and strs
 *     as Python's, int lists as tuples; and releases the GIL. The function writes its outputs
 *     in place and returns None.
 *   - Failures never crash: an exception becomes the status of its class (dk_py_status_of: a
 *     ValueError is DK_EINVAL) with the message "<op>: the Python kernel <module.qualname> at
 *     <key> raised <Type>: <text> (<file>:<line>)", which is what a C caller reads from
 *     dk_last_error(); a Python caller gets the matching DkitError from the original exception
 *     (Note [A Python kernel's exception reaches its Python caller]). A result other than None is
 *     a DK_ETYPE error.
 *   - Tables show the slot as a boxed kernel named "python: <module.qualname>".
 *
 * Lifetime. The record holds fn (and the module, for its types) while registered. remove()
 * unregisters (the table no longer leads to the record) and then drops fn, both under the GIL.
 * A call on another thread may have read the slot just before and reach the record afterwards
 * (calls read the table without a lock: Note [Lock-free table reads]); it finds fn gone, under
 * the GIL, and hands the call back to the table (dk_op_dispatch_boxed), which serves it as if it
 * had started after the removal. So once remove() has returned, fn is never called again, and
 * the record itself is never freed (a few dozen bytes per registration), as the dispatcher never
 * frees a kernel's code. A call that already runs fn keeps its own reference to it.
 *
 * Interpreter shutdown. No thread may take the GIL of a finalizing interpreter (CPython ends
 * such a thread on the spot, in the middle of a C caller's call). An atexit handler, which runs
 * before finalization begins, removes every Python kernel, closes the door (dk__closed) and,
 * with the GIL released, waits until no trampoline is between its test of the door and its
 * release of the GIL (dk__inflight: each increments it before testing, so none passes after the
 * door closed; the wait gives up after 10 s, for a kernel that never returns). From then on a
 * trampoline reached through a stale slot hands its call back to the table without touching
 * Python, and registering is refused.
 *
 * Only the main interpreter registers Python kernels: PyGILState_Ensure knows no other.
 */
#include "dk_py.h" /* first: Python.h must precede every system header (CPython's rule) */

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <structmember.h> /* PyMemberDef, T_OBJECT (in Python.h itself only from 3.12) */

/* The context of one registration. Never freed once registered (see Lifetime above). */
typedef struct dk__pyk {
    const dk_op *op;
    dk_key key;
    PyObject *fn;                /* strong, GIL; NULL once removed */
    PyObject *module;            /* strong (dkit._C, for its state), GIL; NULL once removed */
    dk_handle handle;            /* NULL once removed */
    struct dk__pyk *prev, *next; /* in dk__registered while registered (GIL) */
    char name[];                 /* "python: module.qualname" */
} dk__pyk;

/* k->name + DK__PREFIX is the label alone, for messages. */
#define DK__PREFIX (sizeof "python: " - 1)

static dk__pyk *dk__registered; /* every registered record, of every module instance (GIL) */
static int dk__closed;          /* atomic: set once, by the atexit handler */
static int dk__inflight;        /* atomic: trampolines past their test of dk__closed, not yet done with Python */

static _Thread_local dk_py_kernel_catch *dk__catch;

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                     */

/*
 * Note [A Python kernel's exception reaches its Python caller]
 * A call from Python (dkit._C.ops, under every dkit.ops function) releases the GIL around the
 * core's call; a Python kernel under it raises on the same thread. The core carries only a
 * status and a message back, so the trampoline also leaves the exception object in the bracket
 * the call opened on this thread (dk__catch, dk_py_kernel_catch_begin), and the call raises its
 * DkitError from it: `raise DkitValueError(message) from original`, the original's traceback
 * intact. An exception that is not an Exception (KeyboardInterrupt, SystemExit) is raised again
 * as it is. A call with no bracket (C callers, other threads) has the message only.
 */
void dk_py_kernel_catch_begin(dk_py_kernel_catch *c)
{
    c->exc = NULL;
    c->prev = dk__catch;
    dk__catch = c;
}

int dk_py_kernel_catch_end(dk_py_kernel_catch *c, dk_py_state *s, dk_status st)
{
    dk__catch = c->prev;
    PyObject *exc = c->exc;
    c->exc = NULL;
    if (st == DK_OK) { /* a kernel above recovered from it */
        Py_XDECREF(exc);
        return 0;
    }
    if (exc && !PyErr_GivenExceptionMatches(exc, PyExc_Exception)) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
        return -1;
    }
    dk_py_raise(s, st);
    if (exc) dk_py_set_cause(exc);
    return -1;
}

/* "file:line" of the innermost frame of exc's traceback into buf, or "" (best effort). */
static void dk__where(PyObject *exc, char *buf, size_t n)
{
    buf[0] = 0;
    PyObject *tb = PyException_GetTraceback(exc);
    while (tb) {
        PyObject *next = PyObject_GetAttrString(tb, "tb_next");
        if (!next || next == Py_None) {
            Py_XDECREF(next);
            break;
        }
        Py_DECREF(tb);
        tb = next;
    }
    PyObject *line = tb ? PyObject_GetAttrString(tb, "tb_lineno") : NULL;
    PyObject *frame = tb ? PyObject_GetAttrString(tb, "tb_frame") : NULL;
    PyObject *code = frame ? PyObject_GetAttrString(frame, "f_code") : NULL;
    PyObject *file = code ? PyObject_GetAttrString(code, "co_filename") : NULL;
    const char *f = file && PyUnicode_Check(file) ? PyUnicode_AsUTF8(file) : NULL;
    long l = line ? PyLong_AsLong(line) : -1;
    if (f && l >= 0) PyOS_snprintf(buf, n, " (%s:%ld)", f, l);
    Py_XDECREF(file);
    Py_XDECREF(code);
    Py_XDECREF(frame);
    Py_XDECREF(line);
    Py_XDECREF(tb);
    PyErr_Clear();
}

/* The exception now set, as this thread's dkit error; handed to the bracket if there is one. */
static dk_status dk__raised(const dk__pyk *k)
{
    PyObject *exc = dk_py_fetch_exception();
    if (!exc) return dk_error(DK_ERUNTIME, "%s: the Python kernel %s failed", k->op->name, k->name + DK__PREFIX);
    const dk_status st = dk_py_status_of(exc);
    char where[512];
    dk__where(exc, where, sizeof where);
    PyObject *text = PyObject_Str(exc);
    PyObject *bytes = text ? PyUnicode_AsEncodedString(text, "utf-8", "backslashreplace") : NULL;
    PyErr_Clear();
    const char *msg = bytes ? PyBytes_AS_STRING(bytes) : "";
    dk_error(st, "%s: the Python kernel %s at %s raised %s%s%s%s", k->op->name, k->name + DK__PREFIX,
             dk_key_name(k->key), Py_TYPE(exc)->tp_name, msg[0] ? ": " : "", msg, where);
    Py_XDECREF(bytes);
    Py_XDECREF(text);
    if (dk__catch) {
        Py_XSETREF(dk__catch->exc, exc);
    } else {
        Py_DECREF(exc);
    }
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* The trampoline                                                                             */

static PyObject *dk__value(dk_py_state *s, const dk_op *op, int i, const dk_value *v)
{
    switch (v->tag) {
    case DK_TYPE_NONE: return Py_NewRef(Py_None);
    case DK_TYPE_TENSOR: return v->u.t ? dk_py_kernel_tensor_new(s, op, i, v->u.t) : Py_NewRef(Py_None);
    case DK_TYPE_INT: return PyLong_FromLongLong(v->u.i);
    case DK_TYPE_FLOAT: return PyFloat_FromDouble(v->u.f);
    case DK_TYPE_BOOL: return PyBool_FromLong(v->u.b);
    case DK_TYPE_STR:
        return v->u.s ? PyUnicode_DecodeUTF8(v->u.s, (Py_ssize_t)strlen(v->u.s), "surrogateescape")
                      : Py_NewRef(Py_None);
    case DK_TYPE_INT_LIST: {
        PyObject *t = PyTuple_New((Py_ssize_t)v->u.il.size);
        for (int64_t j = 0; t && j < v->u.il.size; j++) {
            PyObject *x = PyLong_FromLongLong(v->u.il.data[j]);
            if (!x) Py_CLEAR(t);
            else PyTuple_SET_ITEM(t, (Py_ssize_t)j, x);
        }
        return t;
    }
    }
    PyErr_Format(PyExc_SystemError, "argument '%s' has an unknown tag %d", op->args[i].name, (int)v->tag);
    return NULL;
}

/* Calls k's function with the call's arguments. GIL held, k registered. */
static dk_status dk__run(const dk__pyk *k, const dk_op *op, dk_stack *stack)
{
    PyObject *fn = Py_NewRef(k->fn), *module = Py_NewRef(k->module); /* a removal meanwhile drops k's */
    dk_py_state *s = dk_py_state_of_module(module);
    const dk_value *args = dk_stack_args(stack, op);
    PyObject *argv[DK_STACK_MAX];
    int n = 0;
    while (n < op->nargs && (argv[n] = dk__value(s, op, n, &args[n]))) n++;
    PyObject *r = n == op->nargs ? PyObject_Vectorcall(fn, argv, (size_t)n, NULL) : NULL;
    for (int i = 0; i < n; i++) {
        if (Py_IS_TYPE(argv[i], s->kernel_tensor_type)) dk_py_kernel_tensor_expire(argv[i]);
        Py_DECREF(argv[i]);
    }
    dk_status st = DK_OK;
    if (!r) st = dk__raised(k);
    else if (r != Py_None)
        st = dk_error(DK_ETYPE,
                      "%s: the Python kernel %s at %s returned %s: a kernel writes its outputs in place and "
                      "returns None",
                      op->name, k->name + DK__PREFIX, dk_key_name(k->key), Py_TYPE(r)->tp_name);
    Py_XDECREF(r);
    Py_DECREF(fn);
    Py_DECREF(module);
    return st;
}

static bool dk__enter(void)
{
    __atomic_add_fetch(&dk__inflight, 1, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&dk__closed, __ATOMIC_SEQ_CST)) return true;
    __atomic_sub_fetch(&dk__inflight, 1, __ATOMIC_SEQ_CST);
    return false;
}

static dk_status dk__trampoline(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    const dk__pyk *k = ctx;
    if (!dk__enter()) return dk_op_dispatch_boxed(op, ks, stack); /* closed: every kernel was removed */
    PyGILState_STATE g = PyGILState_Ensure();
    const bool removed = !k->fn;
    const dk_status st = removed ? DK_OK : dk__run(k, op, stack);
    PyGILState_Release(g);
    __atomic_sub_fetch(&dk__inflight, 1, __ATOMIC_SEQ_CST);
    /* Removed after this call read its slot: served as the table says now (Note [Python kernels]). */
    return removed ? dk_op_dispatch_boxed(op, ks, stack) : st;
}

/* ------------------------------------------------------------------------------------------ */
/* Registrations: dkit._C.PythonKernel                                                        */

typedef struct {
    PyObject_HEAD dk__pyk *k; /* NULL until registered */
    PyObject *function;       /* kept after removal, for the record */
} dk_py_pykernel;

/* Unregisters k and drops its references. GIL held; does nothing the second time. */
static void dk__remove(dk__pyk *k)
{
    if (!k || !k->handle) return;
    dk_handle h = k->handle;
    k->handle = NULL;
    (void)dk_unregister(h); /* cannot fail: h is live, and only this function releases it */
    if (k->prev) k->prev->next = k->next;
    else dk__registered = k->next;
    if (k->next) k->next->prev = k->prev;
    PyObject *fn = k->fn, *module = k->module;
    k->fn = k->module = NULL; /* Py_DECREF may run code that reaches k: it is consistent first */
    Py_XDECREF(fn);
    Py_XDECREF(module);
}

static PyObject *dk__pk_remove(PyObject *o, PyObject *unused)
{
    (void)unused;
    dk_py_pykernel *self = (dk_py_pykernel *)o;
    if (self->k && self->k->handle) {
        dk__remove(self->k);
        dk_py_state *s = PyType_GetModuleState(Py_TYPE(o));
        if (s->python_kernels) {
            Py_ssize_t i = PySequence_Index(s->python_kernels, o);
            if (i < 0) PyErr_Clear();
            else if (PySequence_DelItem(s->python_kernels, i) < 0) return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *dk__pk_enter(PyObject *o, PyObject *unused)
{
    (void)unused;
    return Py_NewRef(o);
}

static PyObject *dk__pk_exit(PyObject *o, PyObject *args)
{
    (void)args;
    PyObject *r = dk__pk_remove(o, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *dk__pk_op(PyObject *o, void *c)
{
    (void)c;
    const dk__pyk *k = ((dk_py_pykernel *)o)->k;
    return k ? PyUnicode_FromString(k->op->name) : Py_NewRef(Py_None);
}

static PyObject *dk__pk_key(PyObject *o, void *c)
{
    (void)c;
    const dk__pyk *k = ((dk_py_pykernel *)o)->k;
    return k ? PyUnicode_FromString(dk_key_name(k->key)) : Py_NewRef(Py_None);
}

static PyObject *dk__pk_name(PyObject *o, void *c)
{
    (void)c;
    const dk__pyk *k = ((dk_py_pykernel *)o)->k;
    return k ? PyUnicode_FromString(k->name) : Py_NewRef(Py_None);
}

static PyObject *dk__pk_active(PyObject *o, void *c)
{
    (void)c;
    const dk__pyk *k = ((dk_py_pykernel *)o)->k;
    return PyBool_FromLong(k && k->handle);
}

static PyObject *dk__pk_repr(PyObject *o)
{
    const dk__pyk *k = ((dk_py_pykernel *)o)->k;
    if (!k) return PyUnicode_FromString("<dkit Python kernel (unregistered)>");
    return PyUnicode_FromFormat("<dkit Python kernel '%s' of %s at %s%s>", k->name, k->op->name, dk_key_name(k->key),
                                k->handle ? "" : " (removed)");
}

static int dk__pk_traverse(PyObject *o, visitproc visit, void *arg)
{
    dk_py_pykernel *self = (dk_py_pykernel *)o;
    Py_VISIT(Py_TYPE(o));
    Py_VISIT(self->function);
    if (self->k) {
        Py_VISIT(self->k->fn);
        Py_VISIT(self->k->module);
    }
    return 0;
}

/* Garbage, so no longer in the module's list: the module itself is going away. */
static int dk__pk_clear(PyObject *o)
{
    dk_py_pykernel *self = (dk_py_pykernel *)o;
    dk__remove(self->k);
    Py_CLEAR(self->function);
    return 0;
}

static void dk__pk_dealloc(PyObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    PyObject_GC_UnTrack(o);
    dk__pk_clear(o);
    tp->tp_free(o);
    Py_DECREF(tp);
}

static PyMethodDef dk__pk_methods[] = {
    {"remove", dk__pk_remove, METH_NOARGS,
     "Unregister the kernel: the one it shadowed serves again. Once it has returned the function is not called "
     "again. Idempotent."},
    {"__enter__", dk__pk_enter, METH_NOARGS, NULL},
    {"__exit__", dk__pk_exit, METH_VARARGS, "remove()"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef dk__pk_members[] = {
    {"function", T_OBJECT, offsetof(dk_py_pykernel, function), READONLY, "the registered function"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef dk__pk_getset[] = {
    {"op", dk__pk_op, NULL, "the op's name", NULL},
    {"key", dk__pk_key, NULL, "the dispatch key's name", NULL},
    {"name", dk__pk_name, NULL, "the kernel's name in dispatch tables: 'python: module.qualname'", NULL},
    {"active", dk__pk_active, NULL, "True until remove()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot dk__pk_slots[] = {
    {Py_tp_dealloc, (void *)dk__pk_dealloc},
    {Py_tp_traverse, (void *)dk__pk_traverse},
    {Py_tp_clear, (void *)dk__pk_clear},
    {Py_tp_repr, (void *)dk__pk_repr},
    {Py_tp_methods, dk__pk_methods},
    {Py_tp_members, dk__pk_members},
    {Py_tp_getset, dk__pk_getset},
    {Py_tp_doc, (void *)"A Python function registered as an op's kernel (Note [Python kernels] in "
                        "csrc/python/dk_pykernel.c); remove() or a with block unregisters it."},
    {0, NULL},
};

static PyType_Spec dk__pk_spec = {
    .name = "dkit._C.PythonKernel",
    .basicsize = sizeof(dk_py_pykernel),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = dk__pk_slots,
};

/* ------------------------------------------------------------------------------------------ */
/* Module functions                                                                           */

/* register_python_kernel(op, key, fn, label) -> PythonKernel */
static PyObject *dk__register(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = dk_py_state_of_module(m);
    if (n != 4 || !PyUnicode_Check(args[0]) || !PyLong_Check(args[1]) || !PyUnicode_Check(args[3]))
        return dk_py_raise_fmt(s, DK_ETYPE,
                               "register_python_kernel(op, key, fn, label) takes str, int, a callable, str");
    const char *opname = PyUnicode_AsUTF8(args[0]), *label = PyUnicode_AsUTF8(args[3]);
    if (!opname || !label) return NULL;
    const long key = PyLong_AsLong(args[1]);
    if (key == -1 && PyErr_Occurred()) return NULL;
    if (!PyCallable_Check(args[2]))
        return dk_py_raise_fmt(s, DK_ETYPE, "dispatch.kernel: a kernel is a callable, got %s",
                               Py_TYPE(args[2])->tp_name);
    dk_op *op = dk_op_find(opname);
    if (!op) return dk_py_raise_fmt(s, DK_EINVAL, "dispatch.kernel: no op named '%s'", opname);
    if (!dk_key_is_backend((dk_key)key))
        return dk_py_raise_fmt(s, DK_EINVAL,
                               "dispatch.kernel: %s is not a backend key: a Python kernel serves a device's key (cpu, "
                               "cuda, hip or a vendor's), where a call ends",
                               key > 0 && key < DK_NUM_KEYS ? dk_key_name((dk_key)key) : "the key");
    if (PyInterpreterState_Get() != PyInterpreterState_Main())
        return dk_py_raise_fmt(s, DK_ERUNTIME,
                               "dispatch.kernel: Python kernels are registered from the main "
                               "interpreter only");
    if (__atomic_load_n(&dk__closed, __ATOMIC_SEQ_CST))
        return dk_py_raise_fmt(s, DK_ERUNTIME, "dispatch.kernel: the interpreter is shutting down");

    dk_py_pykernel *self = PyObject_GC_New(dk_py_pykernel, s->python_kernel_type);
    if (!self) return NULL;
    self->k = NULL;
    self->function = Py_NewRef(args[2]);
    PyObject_GC_Track((PyObject *)self);
    const size_t len = strlen(label);
    dk__pyk *k = malloc(sizeof *k + len + sizeof "python: ");
    if (!k) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    k->op = op;
    k->key = (dk_key)key;
    k->handle = NULL;
    memcpy(k->name, "python: ", 8);
    memcpy(k->name + DK__PREFIX, label, len + 1);
    k->fn = Py_NewRef(args[2]);
    k->module = Py_NewRef(m);
    /* The GIL is held: the dispatcher's lock is never held while the GIL is waited for. */
    dk_status st = dk_op_register(op, (dk_key)key, dk_kernel_boxed(dk__trampoline, k, k->name), &k->handle);
    if (st != DK_OK) { /* never published: freed */
        Py_DECREF(k->fn);
        Py_DECREF(k->module);
        free(k);
        Py_DECREF(self);
        return dk_py_raise(s, st);
    }
    self->k = k;
    k->prev = NULL;
    k->next = dk__registered;
    if (k->next) k->next->prev = k;
    dk__registered = k;
    if (PyList_Append(s->python_kernels, (PyObject *)self) < 0) {
        Py_DECREF(self); /* removes it */
        return NULL;
    }
    return (PyObject *)self;
}

/* python_kernels() -> list of the PythonKernel registrations in force, oldest first */
static PyObject *dk__list(PyObject *m, PyObject *unused)
{
    (void)unused;
    return PyList_GetSlice(dk_py_state_of_module(m)->python_kernels, 0, PY_SSIZE_T_MAX);
}

/* _close_python_kernels(): the atexit handler (Note [Python kernels], Interpreter shutdown), for
 * every module instance: registered once per process and bound to no module (a module's own
 * would keep that module alive to the end), it removes every module's kernels; called as _C's
 * function (tests), it also empties that module's list. */
static PyObject *dk__close(PyObject *m, PyObject *unused)
{
    (void)unused;
    while (dk__registered) dk__remove(dk__registered);
    dk_py_state *s = m ? dk_py_state_of_module(m) : NULL;
    if (s && s->python_kernels && PyList_SetSlice(s->python_kernels, 0, PY_SSIZE_T_MAX, NULL) < 0) return NULL;
    __atomic_store_n(&dk__closed, 1, __ATOMIC_SEQ_CST);
    Py_BEGIN_ALLOW_THREADS
    const struct timespec ms = {0, 1000000};
    for (int i = 0; i < 10000 && __atomic_load_n(&dk__inflight, __ATOMIC_SEQ_CST) > 0; i++) nanosleep(&ms, NULL);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef dk__close_def = {"_close_python_kernels", dk__close, METH_NOARGS,
                                    "Removes every Python kernel and refuses new ones: run at exit, before the "
                                    "interpreter finalizes."};

static PyMethodDef dk__functions[] = {
    {"register_python_kernel", DK_PY_FASTCALL(dk__register), METH_FASTCALL,
     "register_python_kernel(op, key, fn, label) -> PythonKernel: fn as the kernel of op at backend key `key` (an "
     "id), named 'python: <label>' (Note [Python kernels]). dkit.dispatch.kernel is the API."},
    {"python_kernels", dk__list, METH_NOARGS, "python_kernels() -> the PythonKernel registrations in force"},
    {NULL, NULL, 0, NULL},
};

int dk_py_kernels_init(PyObject *module, dk_py_state *s)
{
    if (dk_py_kernel_tensor_init(module, s) < 0) return -1;
    s->python_kernel_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &dk__pk_spec, NULL);
    if (!s->python_kernel_type || PyModule_AddObjectRef(module, "PythonKernel", (PyObject *)s->python_kernel_type) < 0)
        return -1;
    if (!(s->python_kernels = PyList_New(0))) return -1;
    if (PyModule_AddFunctions(module, dk__functions) < 0) return -1;
    PyObject *close = PyCFunction_NewEx(&dk__close_def, module, NULL);
    if (!close || PyModule_AddObjectRef(module, "_close_python_kernels", close) < 0) {
        Py_XDECREF(close);
        return -1;
    }
    Py_DECREF(close);
    static int at_exit; /* registered with the main interpreter's atexit (GIL) */
    if (at_exit || PyInterpreterState_Get() != PyInterpreterState_Main()) return 0;
    PyObject *atexit = PyImport_ImportModule("atexit");
    close = atexit ? PyCFunction_NewEx(&dk__close_def, NULL, NULL) : NULL;
    PyObject *r = close ? PyObject_CallMethod(atexit, "register", "O", close) : NULL;
    Py_XDECREF(atexit);
    Py_XDECREF(close);
    if (!r) return -1;
    Py_DECREF(r);
    at_exit = 1;
    return 0;
}

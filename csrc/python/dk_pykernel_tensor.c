/*
 * dk_pykernel_tensor.c — dkit._C.KernelTensor: a tensor argument of a Python kernel, as the
 * function receives it (Note [Python kernels] in dk_pykernel.c).
 *
 * Note [A Python kernel's tensors]
 * A Python kernel is called with the dk_tensors of a call that may come from anywhere: torch or
 * NumPy through dkit.ops, another C library through the typed entry, the CPU fallback's host
 * copies, a vendor's device. It gets each as a KernelTensor, a view that owns nothing and copies
 * nothing, through which every framework can compute on the memory in place:
 *   - __dlpack__ / __dlpack_device__ (DLPack's protocol): torch.from_dlpack(t) is a torch tensor
 *     over the same memory, on the CPU or a GPU torch knows, writable; so is any other DLPack
 *     consumer's. The export is a legacy "dltensor" capsule (what torch 1.13 to 2.6 consume),
 *     one per call of __dlpack__, with its own copy of the shape and strides and a deleter that
 *     frees only that copy: it never touches Python, so a consumer may drop it on any thread.
 *   - __array_interface__ (host memory only): numpy.asarray(t) is an array over the memory,
 *     writable exactly when the schema marks the argument as written (NumPy's from_dlpack gives
 *     read-only arrays, which could not fill an output). NumPy has no bfloat16: such a tensor is
 *     a DkitTypeError there, and torch.from_dlpack reads it.
 *   - shape, strides (in elements), dtype ("float32"), device ("cpu", "cuda:0", a vendor's
 *     name), data_ptr (the address of the first element, for a vendor's own runtime), name (the
 *     schema's argument name) and written (the schema's Tensor(a!)).
 * Outputs are written in place: their shapes are the ones the caller allocated, as for a C kernel
 * (Note [Data-dependent output sizes] in ops/nms.h for outputs sized to a bound plus a count).
 *
 * Lifetime: the view borrows the call's DLTensor, which lives as long as the call. When the
 * kernel returns, every view of the call expires: anything read from it then is a
 * DkitBufferError, so a view the function kept (in a global, a closure) cannot reach memory the
 * caller has since freed. What a consumer built from it during the call (a torch tensor, a NumPy
 * array) cannot be revoked, exactly as a C kernel must not keep its arguments' pointers: a kernel
 * keeps nothing of its arguments.
 */
#include "dk_py.h" /* first: Python.h must precede every system header (CPython's rule) */

#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD const DLTensor *t; /* borrowed from the call; NULL once it returned */
    const dk_op *op;
    int arg; /* index in the op's schema */
} dk_py_kernel_tensor;

/* The view's tensor, or NULL with a DkitBufferError once its call has returned. */
static const DLTensor *dk__live(PyObject *o)
{
    const dk_py_kernel_tensor *self = (const dk_py_kernel_tensor *)o;
    if (self->t) return self->t;
    dk_py_raise_fmt(PyType_GetModuleState(Py_TYPE(o)), DK_EBUFFER,
                    "%s: parameter '%s' was an argument of a Python kernel call that has returned: a kernel keeps "
                    "nothing of its arguments (Note [A Python kernel's tensors])",
                    self->op->name, self->op->args[self->arg].name);
    return NULL;
}

PyObject *dk_py_kernel_tensor_new(dk_py_state *s, const dk_op *op, int arg, const DLTensor *t)
{
    dk_py_kernel_tensor *self = PyObject_New(dk_py_kernel_tensor, s->kernel_tensor_type);
    if (!self) return NULL;
    self->t = t;
    self->op = op;
    self->arg = arg;
    return (PyObject *)self;
}

void dk_py_kernel_tensor_expire(PyObject *o) { ((dk_py_kernel_tensor *)o)->t = NULL; }

/* ------------------------------------------------------------------------------------------ */
/* DLPack                                                                                     */

/* One export: the managed tensor and its own copy of the shape and strides. */
typedef struct {
    DLManagedTensor m;
    int64_t dims[]; /* shape, then strides */
} dk__export;

static void dk__export_delete(DLManagedTensor *m) { free(m); }

static PyObject *dk__dlpack(PyObject *o, PyObject *args, PyObject *kwargs)
{
    /* stream=, max_version=, dl_device=, copy= need nothing: the memory is the call's, ready on
     * the stream the call runs on, and the export is always a legacy capsule. */
    (void)args;
    (void)kwargs;
    const DLTensor *t = dk__live(o);
    if (!t) return NULL;
    const int n = t->ndim;
    dk__export *e = malloc(sizeof *e + 2 * (size_t)n * sizeof(int64_t));
    if (!e) return PyErr_NoMemory();
    e->m.dl_tensor = *t;
    e->m.dl_tensor.shape = e->dims;
    e->m.dl_tensor.strides = e->dims + n;
    if (n) memcpy(e->dims, t->shape, (size_t)n * sizeof(int64_t));
    dk_tensor_strides(t, e->dims + n, n);
    e->m.manager_ctx = NULL;
    e->m.deleter = dk__export_delete;
    PyObject *cap = dk_py_legacy_capsule(&e->m);
    if (!cap) free(e);
    return cap;
}

static PyObject *dk__dlpack_device(PyObject *o, PyObject *unused)
{
    (void)unused;
    const DLTensor *t = dk__live(o);
    return t ? Py_BuildValue("(ii)", (int)t->device.device_type, (int)t->device.device_id) : NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* NumPy's array interface (host memory)                                                      */

static PyObject *dk__array_interface(PyObject *o, void *closure)
{
    (void)closure;
    const dk_py_kernel_tensor *self = (const dk_py_kernel_tensor *)o;
    dk_py_state *s = PyType_GetModuleState(Py_TYPE(o));
    const DLTensor *t = dk__live(o);
    if (!t) return NULL;
    const char *name = self->op->args[self->arg].name;
    char dev[64], dt[64];
    if (t->device.device_type != kDLCPU)
        return dk_py_raise_fmt(s, DK_EBUFFER, "%s: parameter '%s' is on %s: NumPy reads host memory only",
                               self->op->name, name, dk_device_str(t->device, dev, sizeof dev));
    char kind = 0;
    switch (t->dtype.code) {
    case kDLInt: kind = 'i'; break;
    case kDLUInt: kind = 'u'; break;
    case kDLFloat: kind = 'f'; break;
    case kDLBool: kind = 'b'; break;
    case kDLComplex: kind = 'c'; break;
    default: break;
    }
    if (!kind || t->dtype.lanes != 1 || t->dtype.bits % 8 || !t->dtype.bits)
        return dk_py_raise_fmt(s, DK_ETYPE,
                               "%s: parameter '%s' is %s, which NumPy has no dtype for (torch.from_dlpack "
                               "reads it)",
                               self->op->name, name, dk_dl_dtype_str(t->dtype, dt, sizeof dt));
    const int bytes = t->dtype.bits / 8;
    char typestr[16];
    PyOS_snprintf(typestr, sizeof typestr, "%c%c%d", bytes == 1 ? '|' : '<', kind, bytes);
    PyObject *shape = PyTuple_New(t->ndim), *strides = PyTuple_New(t->ndim);
    if (!shape || !strides) goto fail;
    for (int d = 0; d < t->ndim; d++) {
        PyObject *n = PyLong_FromLongLong(t->shape[d]);
        PyObject *st = PyLong_FromLongLong(dk_tensor_stride(t, d) * bytes);
        if (n) PyTuple_SET_ITEM(shape, d, n);
        if (st) PyTuple_SET_ITEM(strides, d, st);
        if (!n || !st) goto fail;
    }
    /* NumPy takes a NULL address for "no interface", even with no element to read: a tensor
     * without elements may have no memory (Note [Untrusted tensors] in dk_check.h). */
    uintptr_t data = (uintptr_t)dk_tensor_data(t);
    if (!data && dk_tensor_numel(t) == 0) data = 64;
    const int read_only = !self->op->args[self->arg].out;
    return Py_BuildValue("{s:N,s:s,s:(NO),s:N,s:i}", "shape", shape, "typestr", typestr, "data",
                         PyLong_FromVoidPtr((void *)data), read_only ? Py_True : Py_False, "strides", strides,
                         "version", 3);
fail:
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Attributes                                                                                 */

static PyObject *dk__ints(const int64_t *v, const DLTensor *t, int strides)
{
    PyObject *tup = PyTuple_New(t->ndim);
    for (int d = 0; tup && d < t->ndim; d++) {
        PyObject *x = PyLong_FromLongLong(strides ? dk_tensor_stride(t, d) : v[d]);
        if (!x) Py_CLEAR(tup);
        else PyTuple_SET_ITEM(tup, d, x);
    }
    return tup;
}

static PyObject *dk__shape(PyObject *o, void *c)
{
    (void)c;
    const DLTensor *t = dk__live(o);
    return t ? dk__ints(t->shape, t, 0) : NULL;
}

static PyObject *dk__strides(PyObject *o, void *c)
{
    (void)c;
    const DLTensor *t = dk__live(o);
    return t ? dk__ints(NULL, t, 1) : NULL;
}

static PyObject *dk__dtype(PyObject *o, void *c)
{
    (void)c;
    char buf[64];
    const DLTensor *t = dk__live(o);
    return t ? PyUnicode_FromString(dk_dl_dtype_str(t->dtype, buf, sizeof buf)) : NULL;
}

static PyObject *dk__device(PyObject *o, void *c)
{
    (void)c;
    char buf[64];
    const DLTensor *t = dk__live(o);
    return t ? PyUnicode_FromString(dk_device_str(t->device, buf, sizeof buf)) : NULL;
}

static PyObject *dk__data_ptr(PyObject *o, void *c)
{
    (void)c;
    const DLTensor *t = dk__live(o);
    return t ? PyLong_FromVoidPtr(dk_tensor_data(t)) : NULL;
}

static PyObject *dk__name(PyObject *o, void *c)
{
    (void)c;
    const dk_py_kernel_tensor *self = (const dk_py_kernel_tensor *)o;
    return PyUnicode_FromString(self->op->args[self->arg].name);
}

static PyObject *dk__written(PyObject *o, void *c)
{
    (void)c;
    const dk_py_kernel_tensor *self = (const dk_py_kernel_tensor *)o;
    return PyBool_FromLong(self->op->args[self->arg].out);
}

static PyObject *dk__repr(PyObject *o)
{
    const dk_py_kernel_tensor *self = (const dk_py_kernel_tensor *)o;
    const char *name = self->op->args[self->arg].name;
    if (!self->t) return PyUnicode_FromFormat("<dkit kernel tensor %s of %s (expired)>", name, self->op->name);
    char dev[64], dt[64];
    PyObject *shape = dk__ints(self->t->shape, self->t, 0);
    if (!shape) return NULL;
    PyObject *r = PyUnicode_FromFormat(
        "<dkit kernel tensor %s%s: %s%R on %s>", name, self->op->args[self->arg].out ? " (written)" : "",
        dk_dl_dtype_str(self->t->dtype, dt, sizeof dt), shape, dk_device_str(self->t->device, dev, sizeof dev));
    Py_DECREF(shape);
    return r;
}

static void dk__dealloc(PyObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    tp->tp_free(o);
    Py_DECREF(tp);
}

static PyMethodDef dk__methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))dk__dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(stream=None, max_version=None, dl_device=None, copy=None): a legacy 'dltensor' capsule over the "
     "argument's memory (no copy), valid during the kernel's call."},
    {"__dlpack_device__", dk__dlpack_device, METH_NOARGS, "__dlpack_device__() -> (device_type, device_id)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef dk__getset[] = {
    {"__array_interface__", dk__array_interface, NULL, "NumPy's array interface (host memory; read-only for inputs)",
     NULL},
    {"shape", dk__shape, NULL, "tuple of ints", NULL},
    {"strides", dk__strides, NULL, "tuple of ints, in elements", NULL},
    {"dtype", dk__dtype, NULL, "'float32', 'int64', ...", NULL},
    {"device", dk__device, NULL, "'cpu', 'cuda:0', a vendor backend's device", NULL},
    {"data_ptr", dk__data_ptr, NULL, "address of the first element", NULL},
    {"name", dk__name, NULL, "the schema's name of the argument", NULL},
    {"written", dk__written, NULL, "True for an argument the op writes (Tensor(a!) in the schema)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot dk__slots[] = {
    {Py_tp_dealloc, (void *)dk__dealloc},
    {Py_tp_repr, (void *)dk__repr},
    {Py_tp_methods, dk__methods},
    {Py_tp_getset, dk__getset},
    {Py_tp_doc, (void *)"A tensor argument of a Python kernel, valid during its call (Note [A Python kernel's tensors] "
                        "in csrc/python/dk_pykernel_tensor.c)."},
    {0, NULL},
};

static PyType_Spec dk__spec = {
    .name = "dkit._C.KernelTensor",
    .basicsize = sizeof(dk_py_kernel_tensor),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = dk__slots,
};

int dk_py_kernel_tensor_init(PyObject *module, dk_py_state *s)
{
    s->kernel_tensor_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &dk__spec, NULL);
    if (!s->kernel_tensor_type) return -1;
    return PyModule_AddObjectRef(module, "KernelTensor", (PyObject *)s->kernel_tensor_type);
}

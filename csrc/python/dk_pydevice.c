/*
 * dk_pydevice.c — memory on a backend's device for tensors no framework owns
 * (dkit/_frameworks/backend.py, Note [Outputs on a backend's device]), and unloading backends.
 *
 *   device_empty(device_type, device_id, shape, dtype) -> "dltensor" capsule
 *       uninitialised memory allocated with the device's backend object (dk_backend.h: alloc,
 *       in the thread's current stream for the device); the capsule's deleter frees it with the
 *       same object's free, on that stream. The object is held by pointer, not looked up again:
 *       it has static storage in a library that stays mapped after dk_unload_backend (Note
 *       [Unloading a backend]), so memory allocated before an unload is still freed correctly.
 *   device_rows(x, rows) -> "dltensor" capsule
 *       a view of x's first `rows` rows (x: any DLPack producer, taken and accepted as an op's
 *       argument); it holds x's managed tensor, whose deleter runs when the view's does.
 *   device_read(x) -> bytes, device_write(x, buffer)
 *       the bytes of a row-major contiguous x, copied to or from the host through its backend
 *       object's copy (then the stream synchronised); a plain copy for host memory.
 *   dlpack_dtype(x) -> str
 *       x's dtype by name ("float32", "int64", ...), from its capsule.
 *   unload_backend(name)
 *       dk_unload_backend.
 *
 * The capsules are legacy "dltensor" ones, what every consumer takes (NumPy 1.x, torch 1.13, a
 * vendor's from_dlpack); a consumer renames a capsule it took to "used_dltensor" and owns the
 * managed tensor from then on, otherwise the capsule's destructor calls the deleter.
 */
#include "dk_py.h" /* first: Python.h must precede every system header (CPython's rule) */

#include <stdlib.h>
#include <string.h>

#include "dk_pydlpack.h"

typedef struct {
    DLManagedTensor m;
    int64_t dims[2 * 32];      /* shape, then strides */
    const dk_backend *backend; /* device_empty: the object that allocated data */
    void *stream;
    void *inner; /* device_rows: the viewed tensor's managed tensor, and whether versioned */
    int inner_versioned;
} dk__owned;

static void dk__owned_delete(DLManagedTensor *mt)
{
    dk__owned *o = (dk__owned *)mt;
    if (o->backend && o->m.dl_tensor.data)
        o->backend->free(o->backend->ctx, o->m.dl_tensor.device.device_id, o->m.dl_tensor.data, o->stream);
    if (o->inner) dk_py_managed_delete(o->inner, o->inner_versioned);
    free(o);
}

static PyObject *dk__capsule(dk__owned *o)
{
    PyObject *cap = dk_py_legacy_capsule(&o->m);
    if (!cap) dk__owned_delete(&o->m);
    return cap;
}

static dk__owned *dk__owned_new(dk_py_state *s)
{
    dk__owned *o = calloc(1, sizeof *o);
    if (!o) {
        dk_py_raise_fmt(s, DK_ENOMEM, "out of memory");
        return NULL;
    }
    o->m.manager_ctx = o;
    o->m.deleter = dk__owned_delete;
    o->m.dl_tensor.shape = o->dims;
    return o;
}

static int dk__dtype_of_name(const char *name, DLDataType *out)
{
    for (int d = 0; d < (int)DK_DTYPE_UNSUPPORTED; d++)
        if (strcmp(dk_dtype_name((dk_dtype)d), name) == 0) {
            *out = dk_dtype_to_dl((dk_dtype)d);
            return 0;
        }
    return -1;
}

static PyObject *dk__device_empty(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = dk_py_state_of_module(m);
    if (n != 4 || !PyTuple_Check(args[2]) || !PyUnicode_Check(args[3]))
        return dk_py_raise_fmt(s, DK_ETYPE, "device_empty(device_type, device_id, shape: tuple, dtype: str)");
    const long type = PyLong_AsLong(args[0]), id = PyLong_AsLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    const char *dtname = PyUnicode_AsUTF8(args[3]);
    if (!dtname) return NULL;
    DLDataType dt;
    if (dk__dtype_of_name(dtname, &dt) < 0)
        return dk_py_raise_fmt(s, DK_ETYPE, "device_empty: unknown dtype '%s'", dtname);
    const Py_ssize_t ndim = PyTuple_GET_SIZE(args[2]);
    if (ndim > 32) return dk_py_raise_fmt(s, DK_EINVAL, "device_empty: at most 32 dimensions, got %zd", ndim);
    const DLDevice dev = {(DLDeviceType)type, (int32_t)id};
    const dk_backend *b = dk_backend_of_device(dev);
    if (!b || !b->alloc || !b->free) {
        char where[64];
        return dk_py_raise_fmt(s, DK_ENOTIMPL,
                               "dkit cannot allocate on DLPack device (%ld, %ld) (%s): no backend object with alloc "
                               "and free is registered for it",
                               type, id, dk_device_str(dev, where, sizeof where));
    }
    dk__owned *o = dk__owned_new(s);
    if (!o) return NULL;
    size_t bytes = (size_t)(dt.bits / 8) * dt.lanes;
    for (Py_ssize_t i = 0; i < ndim; i++) {
        const long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(args[2], i));
        if (d < 0 || (d > 0 && bytes > SIZE_MAX / (size_t)d)) {
            dk__owned_delete(&o->m);
            if (PyErr_Occurred()) return NULL;
            return dk_py_raise_fmt(s, DK_EINVAL, "device_empty: bad size %lld", d);
        }
        o->dims[i] = d;
        bytes *= (size_t)d;
    }
    DLTensor *t = &o->m.dl_tensor;
    t->device = dev;
    t->ndim = (int32_t)ndim;
    t->dtype = dt;
    o->stream = dk_current_stream(dev);
    dk_status st;
    void *data = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = b->alloc(b->ctx, dev.device_id, bytes, o->stream, &data);
    Py_END_ALLOW_THREADS
    if (st != DK_OK) {
        dk__owned_delete(&o->m);
        return dk_py_raise(s, st);
    }
    t->data = data;
    o->backend = b;
    return dk__capsule(o);
}

/* x's managed tensor, taken and accepted as an op's argument; its DLTensor in *t. */
static int dk__take(dk_py_state *s, PyObject *x, const char *fn, void **managed, int *versioned, DLTensor **t)
{
    if (dk_py_dlpack_take(s, x, fn, "x", managed, versioned) < 0) return -1;
    *t = *versioned ? &((DLManagedTensorVersioned *)*managed)->dl_tensor : &((DLManagedTensor *)*managed)->dl_tensor;
    return 0;
}

static PyObject *dk__device_rows(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = dk_py_state_of_module(m);
    if (n != 2) return dk_py_raise_fmt(s, DK_ETYPE, "device_rows(x, rows) takes 2 arguments");
    const long long rows = PyLong_AsLongLong(args[1]);
    if (rows == -1 && PyErr_Occurred()) return NULL;
    void *managed;
    int versioned;
    DLTensor *x;
    if (dk__take(s, args[0], "device_rows", &managed, &versioned, &x) < 0) return NULL;
    if (x->ndim < 1 || x->ndim > 32 || rows < 0 || rows > x->shape[0]) {
        const long long have = x->ndim >= 1 ? (long long)x->shape[0] : -1;
        dk_py_managed_delete(managed, versioned);
        return dk_py_raise_fmt(s, DK_EINVAL, "device_rows: %lld rows of a tensor with %lld", rows, have);
    }
    dk__owned *o = dk__owned_new(s);
    if (!o) {
        dk_py_managed_delete(managed, versioned);
        return NULL;
    }
    o->inner = managed;
    o->inner_versioned = versioned;
    DLTensor *t = &o->m.dl_tensor;
    *t = *x;
    t->shape = o->dims;
    memcpy(o->dims, x->shape, (size_t)x->ndim * sizeof(int64_t));
    o->dims[0] = rows;
    if (x->strides) {
        t->strides = o->dims + 32;
        memcpy(t->strides, x->strides, (size_t)x->ndim * sizeof(int64_t));
    }
    return dk__capsule(o);
}

/* Copies the bytes of a row-major contiguous tensor x to the host (from NULL: into a new bytes
 * object, returned) or from the host (`from`, exactly as many bytes: None returned), through
 * x's backend object (then its stream synchronised); a plain copy for host memory. */
static PyObject *dk__host_copy(PyObject *m, const char *fn, PyObject *xobj, const Py_buffer *from)
{
    dk_py_state *s = dk_py_state_of_module(m);
    void *managed;
    int versioned;
    DLTensor *x;
    if (dk__take(s, xobj, fn, &managed, &versioned, &x) < 0) return NULL;
    PyObject *out = NULL, *bytes_obj = NULL;
    const int64_t bytes = dk_tensor_nbytes(x);
    if (!dk_tensor_is_contiguous(x)) {
        dk_py_raise_fmt(s, DK_EINVAL, "%s: the tensor is not row-major contiguous", fn);
        goto done;
    }
    if (from && (int64_t)from->len != bytes) {
        dk_py_raise_fmt(s, DK_EINVAL, "%s: %lld bytes for a tensor of %lld", fn, (long long)from->len,
                        (long long)bytes);
        goto done;
    }
    if (!from && !(bytes_obj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bytes))) goto done;
    char *device = (char *)x->data + x->byte_offset;
    char *host = from ? (char *)from->buf : PyBytes_AS_STRING(bytes_obj);
    dk_status st = DK_OK;
    if (bytes > 0 && (x->device.device_type == kDLCPU || !dk_backend_of_device(x->device))) {
        memcpy(from ? device : host, from ? host : device, (size_t)bytes);
    } else if (bytes > 0) {
        const dk_copy_kind kind = from ? DK_COPY_HOST_TO_DEVICE : DK_COPY_DEVICE_TO_HOST;
        Py_BEGIN_ALLOW_THREADS
        st = dk_device_copy(x->device, from ? device : host, from ? host : device, (size_t)bytes, kind);
        if (st == DK_OK) st = dk_device_synchronize(x->device);
        Py_END_ALLOW_THREADS
    }
    if (st != DK_OK) {
        Py_CLEAR(bytes_obj);
        dk_py_raise(s, st);
        goto done;
    }
    out = from ? Py_NewRef(Py_None) : bytes_obj;
done:
    if (!out) Py_XDECREF(bytes_obj);
    dk_py_managed_delete(managed, versioned);
    return out;
}

static PyObject *dk__device_read(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    if (n != 1) return dk_py_raise_fmt(dk_py_state_of_module(m), DK_ETYPE, "device_read(x) takes 1 argument");
    return dk__host_copy(m, "device_read", args[0], NULL);
}

static PyObject *dk__device_write(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    if (n != 2) return dk_py_raise_fmt(dk_py_state_of_module(m), DK_ETYPE, "device_write(x, data) takes 2 arguments");
    Py_buffer buf;
    if (PyObject_GetBuffer(args[1], &buf, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    PyObject *out = dk__host_copy(m, "device_write", args[0], &buf);
    PyBuffer_Release(&buf);
    return out;
}

static PyObject *dk__dlpack_dtype(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = dk_py_state_of_module(m);
    if (n != 1) return dk_py_raise_fmt(s, DK_ETYPE, "dlpack_dtype(x) takes 1 argument");
    void *managed;
    int versioned;
    DLTensor *x;
    if (dk__take(s, args[0], "dlpack_dtype", &managed, &versioned, &x) < 0) return NULL;
    char buf[64];
    PyObject *name = PyUnicode_FromString(dk_dl_dtype_str(x->dtype, buf, sizeof buf));
    dk_py_managed_delete(managed, versioned);
    return name;
}

static PyObject *dk__unload_backend(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = dk_py_state_of_module(m);
    if (n != 1 || !PyUnicode_Check(args[0])) return dk_py_raise_fmt(s, DK_ETYPE, "unload_backend(name: str)");
    const char *name = PyUnicode_AsUTF8(args[0]);
    if (!name) return NULL;
    dk_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dk_unload_backend(name);
    Py_END_ALLOW_THREADS
    if (st != DK_OK) return dk_py_raise(s, st);
    Py_RETURN_NONE;
}

static PyMethodDef dk__device_methods[] = {
    {"device_empty", DK_PY_FASTCALL(dk__device_empty), METH_FASTCALL,
     "device_empty(device_type, device_id, shape, dtype) -> capsule: memory from the device's backend object."},
    {"device_rows", DK_PY_FASTCALL(dk__device_rows), METH_FASTCALL,
     "device_rows(x, rows) -> capsule: a view of x's first rows."},
    {"device_read", DK_PY_FASTCALL(dk__device_read), METH_FASTCALL,
     "device_read(x) -> bytes: a contiguous tensor's bytes, copied to the host through its backend object."},
    {"device_write", DK_PY_FASTCALL(dk__device_write), METH_FASTCALL,
     "device_write(x, data): a buffer's bytes copied into a contiguous tensor through its backend object."},
    {"dlpack_dtype", DK_PY_FASTCALL(dk__dlpack_dtype), METH_FASTCALL, "dlpack_dtype(x) -> str: x's dtype by name."},
    {"unload_backend", DK_PY_FASTCALL(dk__unload_backend), METH_FASTCALL,
     "unload_backend(name): undo what a loaded backend library registered (Note [Unloading a backend])."},
    {NULL, NULL, 0, NULL},
};

int dk_py_device_init(PyObject *module) { return PyModule_AddFunctions(module, dk__device_methods); }

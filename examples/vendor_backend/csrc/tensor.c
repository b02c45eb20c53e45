/*
 * tensor.c — myvendor._tensor.Tensor: a tensor whose memory lives on the toy device, the base of
 * myvendor.Tensor (myvendor/__init__.py adds NumPy conversions).
 *
 * It owns one DLManagedTensor: memory it allocated through the device's backend object
 * (Tensor._empty; freed through the same object, even after dkit unloaded the backend: the
 * library stays mapped), or memory another producer handed over through DLPack
 * (Tensor.from_dlpack: dkit's outputs, which dkit allocated through the same backend object).
 * Either way it calls that tensor's deleter once, when it is freed.
 *
 * It exports itself with __dlpack__ and __dlpack_device__ (kDLExtDev, device 0), so dkit.ops
 * take it as any DLPack producer; myvendor registers the type with dkit.register_tensor_type, so
 * that ops give their results as Tensors (Note [Outputs on a backend's device] in dkit).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>

#include "dkit.h"

typedef struct {
    PyObject_HEAD DLManagedTensor *managed; /* owned: its deleter runs in tp_dealloc */
} Tensor;

/* ------------------------------------------------------------------------------------------ */
/* Memory this module allocated                                                               */

#define MAX_NDIM 16

typedef struct {
    DLManagedTensor m;
    int64_t shape[MAX_NDIM];
    const dk_backend *backend; /* the object that allocated it frees it */
} Owned;

static void owned_delete(DLManagedTensor *m)
{
    Owned *o = (Owned *)m;
    if (o->m.dl_tensor.data)
        o->backend->free(o->backend->ctx, o->m.dl_tensor.device.device_id, o->m.dl_tensor.data, NULL);
    free(o);
}

/* The device's backend object, when it is myvendor's (loaded and not unloaded). */
static const dk_backend *myvendor_backend(void)
{
    const DLDevice dev = {kDLExtDev, 0};
    const dk_backend *b = dk_backend_of_device(dev);
    if (!b || strcmp(b->name, "myvendor") != 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "myvendor: the backend is not loaded in dkit (dkit.load_backend(myvendor.library()))");
        return NULL;
    }
    return b;
}

static int dtype_of_name(const char *name, DLDataType *out)
{
    for (int d = 0; d < (int)DK_DTYPE_UNSUPPORTED; d++)
        if (strcmp(dk_dtype_name((dk_dtype)d), name) == 0) {
            *out = dk_dtype_to_dl((dk_dtype)d);
            return 0;
        }
    PyErr_Format(PyExc_TypeError, "myvendor: unknown dtype '%s'", name);
    return -1;
}

/* Tensor._empty(shape, dtype): uninitialised device memory. */
static PyObject *Tensor_empty(PyTypeObject *cls, PyObject *args)
{
    PyObject *shape;
    const char *dtname;
    if (!PyArg_ParseTuple(args, "O!s", &PyTuple_Type, &shape, &dtname)) return NULL;
    const Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
    if (ndim > MAX_NDIM) return PyErr_Format(PyExc_ValueError, "myvendor: at most %d dimensions", MAX_NDIM);
    DLDataType dt;
    if (dtype_of_name(dtname, &dt) < 0) return NULL;
    const dk_backend *b = myvendor_backend();
    if (!b) return NULL;
    Owned *o = calloc(1, sizeof *o);
    if (!o) return PyErr_NoMemory();
    o->backend = b;
    o->m.deleter = owned_delete;
    size_t bytes = dt.bits / 8;
    for (Py_ssize_t i = 0; i < ndim; i++) {
        const long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        if (d < 0 || (d > 0 && bytes > SIZE_MAX / (size_t)d)) {
            free(o);
            return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "myvendor: bad size %lld", d);
        }
        o->shape[i] = d;
        bytes *= (size_t)d;
    }
    DLTensor *t = &o->m.dl_tensor;
    t->device = (DLDevice){kDLExtDev, 0};
    t->ndim = (int32_t)ndim;
    t->dtype = dt;
    t->shape = o->shape;
    void *data = NULL;
    if (b->alloc(b->ctx, 0, bytes, NULL, &data) != DK_OK) {
        free(o);
        return PyErr_Format(PyExc_MemoryError, "myvendor: %s", dk_last_error());
    }
    t->data = data;
    Tensor *self = (Tensor *)cls->tp_alloc(cls, 0);
    if (!self) {
        owned_delete(&o->m);
        return NULL;
    }
    self->managed = &o->m;
    return (PyObject *)self;
}

/* Tensor.from_dlpack(x): takes over x's memory, which must be on the toy device. */
static PyObject *Tensor_from_dlpack(PyTypeObject *cls, PyObject *x)
{
    PyObject *cap = PyObject_CallMethod(x, "__dlpack__", NULL);
    if (!cap) return NULL;
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (!m) {
        Py_DECREF(cap);
        return NULL;
    }
    if (m->dl_tensor.device.device_type != kDLExtDev || m->dl_tensor.device.device_id != 0) {
        Py_DECREF(cap); /* not taken: the capsule's destructor gives it back */
        return PyErr_Format(PyExc_BufferError,
                            "myvendor: from_dlpack: a tensor on DLPack device (%d, %d), not myvendor's",
                            (int)m->dl_tensor.device.device_type, (int)m->dl_tensor.device.device_id);
    }
    Tensor *self = (Tensor *)cls->tp_alloc(cls, 0);
    if (!self || PyCapsule_SetName(cap, "used_dltensor") < 0) {
        Py_XDECREF(self);
        Py_DECREF(cap);
        return NULL;
    }
    self->managed = m;
    Py_DECREF(cap);
    return (PyObject *)self;
}

static void Tensor_dealloc(Tensor *self)
{
    if (self->managed && self->managed->deleter) self->managed->deleter(self->managed);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ------------------------------------------------------------------------------------------ */
/* DLPack export: a view that keeps the Tensor alive                                          */

typedef struct {
    DLManagedTensor m;
    PyObject *owner;
} Export;

static void export_delete(DLManagedTensor *m)
{
    Export *e = (Export *)m;
    PyGILState_STATE g = PyGILState_Ensure(); /* a consumer may let go from any thread */
    Py_DECREF(e->owner);
    PyGILState_Release(g);
    free(e);
}

static void capsule_destructor(PyObject *cap)
{
    if (!PyCapsule_IsValid(cap, "dltensor")) return; /* taken: the consumer calls the deleter */
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
}

static PyObject *Tensor_dlpack(Tensor *self, PyObject *args, PyObject *kwargs)
{
    /* stream, max_version, dl_device, copy: the device has one synchronous stream, and this
     * exports the legacy (unversioned) capsule, which every consumer takes. */
    (void)args, (void)kwargs;
    Export *e = calloc(1, sizeof *e);
    if (!e) return PyErr_NoMemory();
    e->m.dl_tensor = self->managed->dl_tensor; /* shape and strides stay the owner's */
    e->m.manager_ctx = e;
    e->m.deleter = export_delete;
    e->owner = Py_NewRef((PyObject *)self);
    PyObject *cap = PyCapsule_New(&e->m, "dltensor", capsule_destructor);
    if (!cap) export_delete(&e->m);
    return cap;
}

static PyObject *Tensor_dlpack_device(Tensor *self, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("(ii)", (int)kDLExtDev, (int)self->managed->dl_tensor.device.device_id);
}

/* ------------------------------------------------------------------------------------------ */
/* Copies to and from the host, through the backend object                                    */

static int contiguous_bytes(Tensor *self, size_t *bytes)
{
    const DLTensor *t = &self->managed->dl_tensor;
    if (!dk_tensor_is_contiguous(t)) {
        PyErr_SetString(PyExc_ValueError, "myvendor: the tensor is not contiguous");
        return -1;
    }
    *bytes = (size_t)dk_tensor_nbytes(t);
    return 0;
}

static PyObject *Tensor_read(Tensor *self, PyObject *unused)
{
    (void)unused;
    size_t bytes;
    const dk_backend *b = myvendor_backend();
    if (!b || contiguous_bytes(self, &bytes) < 0) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bytes);
    if (!out || bytes == 0) return out;
    if (b->copy(b->ctx, 0, PyBytes_AS_STRING(out), dk_tensor_data(&self->managed->dl_tensor), bytes,
                DK_COPY_DEVICE_TO_HOST, NULL) != DK_OK) {
        Py_DECREF(out);
        return PyErr_Format(PyExc_RuntimeError, "myvendor: %s", dk_last_error());
    }
    return out;
}

static PyObject *Tensor_write(Tensor *self, PyObject *data)
{
    size_t bytes;
    const dk_backend *b = myvendor_backend();
    if (!b || contiguous_bytes(self, &bytes) < 0) return NULL;
    Py_buffer buf;
    if (PyObject_GetBuffer(data, &buf, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    PyObject *ret = NULL;
    if ((size_t)buf.len != bytes) {
        PyErr_Format(PyExc_ValueError, "myvendor: %zd bytes for a tensor of %zu", buf.len, bytes);
    } else if (bytes && b->copy(b->ctx, 0, dk_tensor_data(&self->managed->dl_tensor), buf.buf, bytes,
                                DK_COPY_HOST_TO_DEVICE, NULL) != DK_OK) {
        PyErr_Format(PyExc_RuntimeError, "myvendor: %s", dk_last_error());
    } else {
        ret = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&buf);
    return ret;
}

/* ------------------------------------------------------------------------------------------ */
/* Attributes                                                                                 */

static PyObject *Tensor_shape(Tensor *self, void *closure)
{
    (void)closure;
    const DLTensor *t = &self->managed->dl_tensor;
    PyObject *shape = PyTuple_New(t->ndim);
    for (int i = 0; shape && i < t->ndim; i++) {
        PyObject *d = PyLong_FromLongLong(t->shape[i]);
        if (!d) Py_CLEAR(shape);
        else PyTuple_SET_ITEM(shape, i, d);
    }
    return shape;
}

static PyObject *Tensor_dtype(Tensor *self, void *closure)
{
    (void)closure;
    char buf[64];
    return PyUnicode_FromString(dk_dl_dtype_str(self->managed->dl_tensor.dtype, buf, sizeof buf));
}

static PyObject *Tensor_ndim(Tensor *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->managed->dl_tensor.ndim);
}

static PyMethodDef Tensor_methods[] = {
    {"_empty", (PyCFunction)Tensor_empty, METH_VARARGS | METH_CLASS,
     "_empty(shape, dtype): an uninitialised tensor on the device."},
    {"from_dlpack", (PyCFunction)Tensor_from_dlpack, METH_O | METH_CLASS,
     "from_dlpack(x): a Tensor owning x's memory (x: a DLPack producer on the device)."},
    {"__dlpack__", (PyCFunction)(void (*)(void))Tensor_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None): a 'dltensor' capsule."},
    {"__dlpack_device__", (PyCFunction)Tensor_dlpack_device, METH_NOARGS, "(kDLExtDev, device id)"},
    {"_read", (PyCFunction)Tensor_read, METH_NOARGS, "the bytes of a contiguous tensor, copied to the host"},
    {"_write", (PyCFunction)Tensor_write, METH_O, "_write(buffer): host bytes copied into a contiguous tensor"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Tensor_getset[] = {
    {"shape", (getter)Tensor_shape, NULL, "the shape, a tuple of ints", NULL},
    {"dtype", (getter)Tensor_dtype, NULL, "the dtype's name ('float32', ...)", NULL},
    {"ndim", (getter)Tensor_ndim, NULL, "the number of dimensions", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *Tensor_new(PyTypeObject *cls, PyObject *args, PyObject *kwargs)
{
    (void)cls, (void)args, (void)kwargs;
    PyErr_SetString(PyExc_TypeError, "myvendor: make tensors with myvendor.tensor(array) or myvendor.from_dlpack(x)");
    return NULL;
}

static PyTypeObject TensorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "myvendor._tensor.Tensor",
    .tp_basicsize = sizeof(Tensor),
    .tp_dealloc = (destructor)Tensor_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A tensor on the myvendor toy device (DLPack kDLExtDev).",
    .tp_methods = Tensor_methods,
    .tp_getset = Tensor_getset,
    .tp_new = Tensor_new,
};

static struct PyModuleDef tensor_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "myvendor._tensor",
    .m_doc = "The myvendor device's tensor type.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__tensor(void)
{
    if (PyType_Ready(&TensorType) < 0) return NULL;
    PyObject *m = PyModule_Create(&tensor_module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Tensor", (PyObject *)&TensorType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

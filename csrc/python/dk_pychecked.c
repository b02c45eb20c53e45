/*
 * dk_pychecked.c — dkit._C.dlpack_checked: another framework's tensor, validated by the core
 * before any other consumer reads it.
 *
 * Note [Checked exports]
 * dkit serves a tensor of a framework it does not know (neither torch nor NumPy) by viewing it
 * as a NumPy array (dkit/_frameworks/dlpack.py), and a foreign tensor passed as boxes next to a
 * torch or NumPy input through that framework's from_dlpack. Those consumers trust the capsule:
 * NumPy 1.24 reads ndim entries of shape and strides, and builds an array over a NULL data
 * pointer, before dkit's C core ever sees it; a malformed capsule (NULL data with 8,192
 * elements, a NULL shape with ndim 4, a huge ndim) is then a crash or an array over memory that
 * is not there. So the framework layer never hands a producer to them directly:
 *
 *     np.from_dlpack(_C.dlpack_checked(x, "roi_align", "input"))
 *
 * dlpack_checked takes the producer's capsule exactly as an op's argument is taken (the same
 * protocol, dk_dlpack_accept: version, flags, Note [Untrusted tensors]), with the op and the
 * parameter for its errors, and returns a small object that owns the accepted managed tensor
 * and exports it once, as a legacy "dltensor" capsule (what NumPy 1.x and torch 1.13 consume).
 * A versioned (DLPack 1.x) tensor is wrapped in a legacy DLManagedTensor whose deleter calls
 * the versioned one. Nothing runs between the validation and the consumer's read but the
 * consumer's own call of __dlpack__, so what the consumer reads is what the core accepted.
 * Either the consumer (through the capsule) or the object (when never exported) calls the
 * producer's deleter, once.
 */
#include "dk_py.h" /* first: Python.h must precede every system header (CPython's rule) */

#include <stdlib.h>
#include <string.h>

#include "dk_pydlpack.h"

typedef struct {
    PyObject_HEAD void *managed; /* owned until exported; NULL after */
    int versioned;
    DLDevice device;
} dk_py_checked;

/* A versioned tensor handed out as a legacy one: the wrapper is freed with it. */
typedef struct {
    DLManagedTensor legacy;
    DLManagedTensorVersioned *inner;
} dk__legacy_wrap;

static void dk__wrap_delete(DLManagedTensor *m)
{
    dk__legacy_wrap *w = (dk__legacy_wrap *)m;
    if (w->inner->deleter) w->inner->deleter(w->inner);
    free(w);
}

void dk_py_managed_delete(void *managed, int versioned)
{
    if (versioned) {
        DLManagedTensorVersioned *mv = managed;
        if (mv->deleter) mv->deleter(mv);
    } else {
        DLManagedTensor *ml = managed;
        if (ml->deleter) ml->deleter(ml);
    }
}

/* The exported capsule's destructor: a consumer that took it renamed it "used_dltensor". */
void dk_py_dltensor_capsule_destructor(PyObject *cap)
{
    if (!PyCapsule_IsValid(cap, "dltensor")) return;
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
}

PyObject *dk_py_legacy_capsule(DLManagedTensor *m)
{
    return PyCapsule_New(m, "dltensor", dk_py_dltensor_capsule_destructor);
}

static PyObject *dk__checked_dlpack(PyObject *o, PyObject *args, PyObject *kwargs)
{
    /* stream= and max_version= are accepted and need nothing: the producer was asked for the
     * consumer's default stream when dkit took the tensor, and the export is always legacy. */
    (void)args;
    (void)kwargs;
    dk_py_checked *self = (dk_py_checked *)o;
    if (!self->managed) {
        dk_py_state *s = PyType_GetModuleState(Py_TYPE(o));
        return dk_py_raise_fmt(s, DK_EBUFFER, "dlpack_checked: this tensor was already exported");
    }
    DLManagedTensor *legacy;
    if (self->versioned) {
        dk__legacy_wrap *w = malloc(sizeof *w);
        if (!w) return PyErr_NoMemory();
        w->inner = self->managed;
        w->legacy.dl_tensor = w->inner->dl_tensor;
        w->legacy.manager_ctx = NULL;
        w->legacy.deleter = dk__wrap_delete;
        legacy = &w->legacy;
    } else {
        legacy = self->managed;
    }
    PyObject *cap = dk_py_legacy_capsule(legacy);
    if (!cap) {
        if (self->versioned) free(legacy);
        return NULL;
    }
    self->managed = NULL; /* the capsule owns it now */
    return cap;
}

static PyObject *dk__checked_device(PyObject *o, PyObject *unused)
{
    (void)unused;
    const dk_py_checked *self = (const dk_py_checked *)o;
    return Py_BuildValue("(ii)", (int)self->device.device_type, (int)self->device.device_id);
}

static void dk__checked_dealloc(PyObject *o)
{
    dk_py_checked *self = (dk_py_checked *)o;
    PyTypeObject *tp = Py_TYPE(o);
    if (self->managed) dk_py_managed_delete(self->managed, self->versioned);
    tp->tp_free(o);
    Py_DECREF(tp);
}

static PyMethodDef dk__checked_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))dk__checked_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(stream=None, max_version=None): the checked tensor as a legacy 'dltensor' capsule, once."},
    {"__dlpack_device__", dk__checked_device, METH_NOARGS, "__dlpack_device__() -> (device_type, device_id)"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot dk__checked_slots[] = {
    {Py_tp_dealloc, (void *)dk__checked_dealloc},
    {Py_tp_methods, dk__checked_methods},
    {Py_tp_doc, (void *)"A producer's tensor accepted by dkit's core, exported once (Note [Checked exports])."},
    {0, NULL},
};

static PyType_Spec dk__checked_spec = {
    .name = "dkit._C.CheckedTensor",
    .basicsize = sizeof(dk_py_checked),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = dk__checked_slots,
};

/* dlpack_checked(obj, op, arg) -> CheckedTensor */
static PyObject *dk__dlpack_checked(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = dk_py_state_of_module(m);
    if (n != 3 || !PyUnicode_Check(args[1]) || !PyUnicode_Check(args[2]))
        return dk_py_raise_fmt(s, DK_ETYPE, "dlpack_checked(obj, op, arg) takes a tensor and two str");
    const char *op = PyUnicode_AsUTF8(args[1]), *arg = PyUnicode_AsUTF8(args[2]);
    if (!op || !arg) return NULL;
    void *managed;
    int versioned;
    if (dk_py_dlpack_take(s, args[0], op, arg, &managed, &versioned) < 0) return NULL;
    dk_py_checked *self = PyObject_New(dk_py_checked, s->checked_type);
    if (!self) {
        dk_py_managed_delete(managed, versioned);
        return NULL;
    }
    self->managed = managed;
    self->versioned = versioned;
    self->device = versioned ? ((DLManagedTensorVersioned *)managed)->dl_tensor.device
                             : ((DLManagedTensor *)managed)->dl_tensor.device;
    return (PyObject *)self;
}

static PyMethodDef dk__functions[] = {
    {"dlpack_checked", DK_PY_FASTCALL(dk__dlpack_checked), METH_FASTCALL,
     "dlpack_checked(obj, op, arg) -> CheckedTensor: obj's tensor (a DLPack producer or capsule), accepted by "
     "dkit's core for reading as parameter `arg` of `op` (errors name both), to be consumed once by "
     "numpy.from_dlpack or torch.from_dlpack (Note [Checked exports])."},
    {NULL, NULL, 0, NULL},
};

int dk_py_checked_init(PyObject *module, dk_py_state *s)
{
    s->checked_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &dk__checked_spec, NULL);
    if (!s->checked_type || PyModule_AddObjectRef(module, "CheckedTensor", (PyObject *)s->checked_type) < 0) return -1;
    return PyModule_AddFunctions(module, dk__functions);
}

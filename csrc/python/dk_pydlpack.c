/*
 * dk_pydlpack.c — DLPack import: producers, capsules, ownership.
 *
 * One file at about 900 lines on purpose: the producer cache, the capsule ownership rules, the
 * torch fast path and the checked exports are one sequence (ask, take, validate, rename or
 * release) whose error paths share the ownership state; split across files, each part would
 * need the others' private invariants.
 *
 * Note [DLPack ownership]
 * A capsule named "dltensor" / "dltensor_versioned" owns its managed tensor: the producer's
 * capsule destructor calls the deleter if nobody consumed it. A consumer takes ownership by
 * renaming the capsule to "used_dltensor" / "used_dltensor_versioned" — from then on the
 * destructor does nothing and the consumer must call the deleter exactly once. dkit renames only
 * after it has accepted the tensor (version, read-only flag, sane shape), so a refused capsule
 * stays with whoever holds it and is freed by its own destructor: nothing leaks and nothing is
 * freed twice, on every error path.
 *
 * Note [Producer cache]
 * The protocol asks consumers to call __dlpack__(max_version=...) and to fall back to the legacy
 * call when an older producer raises TypeError. Raising and catching an exception costs about a
 * microsecond, so each type's answer is remembered (a small array of strong type references in
 * the module state; types beyond its size are simply asked every time). A type is recorded as
 * legacy only once the legacy call succeeded, so a TypeError for another reason (a bad stream,
 * say) never mislabels it.
 *
 * Note [torch fast path]
 * For torch tensors DLPack is the slow way in: Tensor.__dlpack__ (torch 1.13) is Python code,
 * and even the C function under it, torch._C._to_dlpack, builds an autograd-aware as_strided
 * view per call (~0.4 us, plus its destruction). A small op call takes three tensors, so that
 * alone would cost more than torchvision's whole roi_align. A torch.Tensor on the CPU is
 * therefore read directly: is_cpu, dtype, shape, stride() and data_ptr(), each through
 * _TensorBase's own descriptor (~0.1 us per tensor in all), into a DLTensor on the C stack, and
 * the tensor object is held for the call. This is exactly what DLPack would have described —
 * the same memory, shape, strides and dtype, no copy — without the allocations.
 *   - Which types: torch.Tensor and subclasses that override none of __torch_function__ (other
 *     than torch's "disabled" marker, as nn.Parameter does), __torch_dispatch__ (wrapper
 *     subclasses keep their data elsewhere: their own storage is a placeholder), __dlpack__, or
 *     the attributes read here; decided once per type. Any other subclass is a protocol producer.
 *   - What falls back to the protocol (__dlpack_device__/__dlpack__, with its stream and its
 *     checks): tensors not on the CPU (streams, meta), dtypes dkit has no DLPack code for
 *     (complex, quantized), layouts without storage (sparse, mkldnn: data_ptr() fails; their
 *     stride() does NOT fail in torch 1.13, sparse COO returns made-up strides), and outputs
 *     that require grad (torch raises its own error; dkit never writes into a tensor autograd
 *     tracks). Ranks above DK_PY_VIEW_NDIM use torch._C._to_dlpack.
 *   - A tensor with elements but a NULL data_ptr() (torch's efficient zero tensors, which
 *     autograd makes) is refused, as on every path (Note [NULL data]).
 *   - Inputs that require grad are read as they are: dkit only reads them, and the autograd
 *     wrapper then needs no .detach() (which torch's __dlpack__ would insist on).
 *   - A lazily negated view (torch's negative bit: x.conj().imag, x._neg_view()) keeps its values
 *     un-negated in memory, and torch 1.13's own DLPack export hands that memory out as it is.
 *     dkit refuses such a tensor with a DkitValueError that says to pass .resolve_neg() of it,
 *     rather than compute with the wrong signs.
 *   - Lifetime: the tensor's storage is referenced until after the call (the getters take
 *     Tensor.untyped_storage(), _storage() in torch 1.13; the reader holds the StorageImpl), as a
 *     torch op holds it. Holding only the tensor object is not enough: Python code that runs
 *     while later arguments are converted (__index__, another producer's __dlpack__), or another
 *     thread once the GIL is released, may give the tensor other memory (set_(), .data =) and
 *     free the old one.
 *   - This path is a shortcut, never the only way in: without it (a torch whose getters changed
 *     shape, a tensor it declines) the protocol path gives the same answer, inputs that require
 *     grad included (Note [Inputs that require grad]).
 *   - GPU tensors: Note [torch fast path on a GPU].
 *   - Faster still: where dkit._torch_reader was built, its C++ function reads the same five
 *     facts from the at::Tensor in ~10 ns instead of ~140 ns (Note [torch reader] in
 *     dk_pytorch.h); whatever it declines (the cases above) comes here, to the getters.
 */
#include "dk_pydlpack.h"

/*
 * Note [torch fast path on a GPU]
 * A torch tensor on a GPU is read by the same getters as a CPU one (plus is_cuda and
 * get_device()), not exported through __dlpack__, when the call's kernels will run on torch's
 * current stream for its device (dk_py_on_framework_stream): there, __dlpack__(stream=S) would
 * have nothing to synchronise (torch's pending work on the tensor is on that stream already),
 * and dkit's kernel is ordered after it and before torch's next op, exactly as a torch op is.
 * __dlpack__ itself is Python code in torch, which asked torch.cuda for its current and default
 * streams twice per tensor: three tensors of a tiny roi_align cost more than the kernel (74 us
 * a call against torchvision's 40 us on an H100). Under a dkit.stream() block for another
 * stream the protocol runs, and its handshake makes that stream wait for torch's.
 */

#include <stdlib.h>
#include <string.h>

/* PyCapsule_SetName keeps the pointer, so the names must have static storage. */
static const char dk__cap_legacy[] = "dltensor";
static const char dk__cap_versioned[] = "dltensor_versioned";
static const char dk__cap_used_legacy[] = "used_dltensor";
static const char dk__cap_used_versioned[] = "used_dltensor_versioned";

/*
 * Note [NULL data]
 * A tensor with elements but a NULL data pointer has no memory behind it. torch makes such
 * tensors (efficient zero tensors: torch._efficientzerotensor, which autograd creates for
 * zero gradients; __torch_dispatch__ wrapper subclasses) and its DLPack export hands them out
 * as they are. A kernel would dereference NULL, so they are refused on every path, before a
 * capsule is consumed (its holder still frees it). Zero-element tensors may have a NULL data
 * pointer; they are fine.
 */
static int dk__refuse_null_data(dk_py_state *s, const DLTensor *t, const char *op, const char *arg)
{
    if (t->data) return 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) return 0;
    dk_py_raise_fmt(s, DK_EBUFFER,
                    "%s: parameter '%s' has elements but no memory (a NULL data pointer, e.g. torch's "
                    "efficient zero tensor, a wrapper subclass, or a storage freed with resize_(0))",
                    op, arg);
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Capsules                                                                                   */

static int dk__take_capsule(dk_py_state *s, PyObject *cap, int writable, const char *op, const char *arg,
                            dk_py_owners *owners, DLTensor **out)
{
    const char *name = PyCapsule_GetName(cap);
    if (!name && PyErr_Occurred()) return -1;
    void *managed;
    DLTensor *t;
    int versioned;
    if (name && (strcmp(name, dk__cap_versioned) == 0 || strcmp(name, dk__cap_legacy) == 0)) {
        versioned = strcmp(name, dk__cap_versioned) == 0;
        managed = PyCapsule_GetPointer(cap, name);
        if (!managed) return -1;
    } else if (name && strncmp(name, "used_", 5) == 0) {
        dk_py_raise_fmt(s, DK_EBUFFER, "%s: parameter '%s' is a DLPack capsule that was already consumed", op, arg);
        return -1;
    } else {
        dk_py_raise_fmt(s, DK_ETYPE, "%s: parameter '%s' is a capsule named '%s', not a DLPack tensor", op, arg,
                        name ? name : "(null)");
        return -1;
    }
    /* Version, flags and Note [Untrusted tensors] (dk_check.h), before anything reads it and
     * before it is consumed (a refused capsule stays its holder's, whose destructor frees it). */
    if (dk_dlpack_accept(managed, versioned, writable, op, arg, &t) != DK_OK) {
        dk_py_raise(s, dk_last_status());
        return -1;
    }
    if (PyCapsule_SetName(cap, versioned ? dk__cap_used_versioned : dk__cap_used_legacy) < 0) return -1;
    dk_py_owner *o = &owners->o[owners->n++];
    o->ref = Py_NewRef(cap);
    o->managed = managed;
    o->versioned = versioned;
    o->keep = NULL;
    o->unkeep = NULL;
    *out = t;
    return 0;
}

void dk_py_owners_release(dk_py_owners *owners)
{
    /* Newest first, like a stack unwinding; each deleter once. The GIL is held, which the
     * deleters of Python producers (numpy's) need and the others do not mind. A deleter or a
     * decref may run Python code, which must not see (or clobber) the exception this call is
     * about to raise, so it is set aside meanwhile. */
    dk_py_restore_streams(owners); /* first: they hold no Python objects */
    if (owners->n == 0) return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    for (int i = owners->n - 1; i >= 0; i--) {
        dk_py_owner *o = &owners->o[i];
        if (!o->managed) {
            /* a torch tensor read directly: nothing to delete; the reader's storage reference */
            if (o->keep) o->unkeep(o->keep);
        } else if (o->versioned) {
            DLManagedTensorVersioned *mv = o->managed;
            if (mv->deleter) mv->deleter(mv);
        } else {
            DLManagedTensor *ml = o->managed;
            if (ml->deleter) ml->deleter(ml);
        }
        Py_DECREF(o->ref); /* a capsule renamed "used_*": its destructor leaves the tensor alone */
    }
    owners->n = 0;
    owners->nviews = 0;
    PyErr_Restore(type, value, tb);
}

/* ------------------------------------------------------------------------------------------ */
/* The producer cache (Note [Producer cache])                                                 */

static int dk__cache_find(const dk_py_state *s, PyTypeObject *tp)
{
    /* Entries are filled in order and only removed all at once (module clear), so the first
     * free entry ends the search. */
    for (int i = 0; i < DK_PY_TYPE_CACHE && s->types[i].type; i++)
        if (s->types[i].type == tp) return (int)s->types[i].kind;
    return -1;
}

static void dk__cache_add(dk_py_state *s, PyTypeObject *tp, dk_py_producer_kind kind)
{
    for (int i = 0; i < DK_PY_TYPE_CACHE; i++) {
        if (s->types[i].type == tp) return; /* another thread got here while we ran Python code */
        if (!s->types[i].type) {
            s->types[i].type = (PyTypeObject *)Py_NewRef((PyObject *)tp);
            s->types[i].kind = kind;
            return;
        }
    }
}

/* Every PyObject * of dk_py_torch, for clear and traverse. */
/* An X-list, grouped by hand (clang-format reads it as one expression). */
// clang-format off
#define DK__TORCH_REFS(X, t)                                                                  \
    X((t)->tensor) X((t)->to_dlpack) X((t)->tf_default) X((t)->tf_disabled) X((t)->td_default) \
    X((t)->dlpack_fn)                                                                         \
    X((t)->d_is_cpu) X((t)->d_requires_grad) X((t)->d_dtype) X((t)->d_shape) X((t)->d_data_ptr) \
    X((t)->d_stride) X((t)->d_is_neg) X((t)->d_storage) X((t)->d_is_meta) X((t)->reader_capsule)             \
    X((t)->d_is_cuda) X((t)->d_get_device)
// clang-format on

static void dk__torch_clear(dk_py_torch *t)
{
    t->found = 0; /* first: a decref below may run code that imports a tensor */
    t->reader = NULL;
#define DK__CLEAR(x) Py_CLEAR(x);
    DK__TORCH_REFS(DK__CLEAR, t)
#undef DK__CLEAR
    for (int i = 0; i < DK_PY_TORCH_DTYPES; i++) Py_CLEAR(t->dtypes[i]);
}

void dk_py_dlpack_clear(dk_py_state *s)
{
    for (int i = 0; i < DK_PY_TYPE_CACHE; i++) Py_CLEAR(s->types[i].type);
    dk__torch_clear(&s->torch);
}

int dk_py_dlpack_traverse(dk_py_state *s, visitproc visit, void *arg)
{
    for (int i = 0; i < DK_PY_TYPE_CACHE; i++) Py_VISIT(s->types[i].type);
    dk_py_torch *t = &s->torch;
#define DK__VISIT(x) Py_VISIT(x);
    DK__TORCH_REFS(DK__VISIT, t)
#undef DK__VISIT
    for (int i = 0; i < DK_PY_TORCH_DTYPES; i++) Py_VISIT(t->dtypes[i]);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* torch (Note [torch fast path])                                                             */

/* getattr(obj, name).__func__ if it has one, else the attribute itself (new reference). */
static PyObject *dk__unwrap_method(PyObject *obj, const char *name)
{
    PyObject *a = PyObject_GetAttrString(obj, name);
    if (!a) return NULL;
    PyObject *f = PyObject_GetAttrString(a, "__func__");
    if (f) {
        Py_DECREF(a);
        return f;
    }
    PyErr_Clear();
    return a;
}

/* The attributes the fast path reads, with the descriptor kind each must be. The storage getter
 * is Tensor._storage() in torch 1.13 and Tensor.untyped_storage() from torch 2.0 on (the first
 * name of the two that torch's tensor base has is read). */
static const struct {
    const char *name, *alt;
    size_t offset;
    int getset; /* 1: getset descriptor, 0: method descriptor */
} dk__torch_attrs[] = {
    {"is_cpu", NULL, offsetof(dk_py_torch, d_is_cpu), 1},
    {"requires_grad", NULL, offsetof(dk_py_torch, d_requires_grad), 1},
    {"dtype", NULL, offsetof(dk_py_torch, d_dtype), 1},
    {"shape", NULL, offsetof(dk_py_torch, d_shape), 1},
    {"data_ptr", NULL, offsetof(dk_py_torch, d_data_ptr), 0},
    {"stride", NULL, offsetof(dk_py_torch, d_stride), 0},
    {"is_neg", NULL, offsetof(dk_py_torch, d_is_neg), 0},
    {"is_meta", NULL, offsetof(dk_py_torch, d_is_meta), 1},
    {"untyped_storage", "_storage", offsetof(dk_py_torch, d_storage), 0},
    {"is_cuda", NULL, offsetof(dk_py_torch, d_is_cuda), 1},
    {"get_device", NULL, offsetof(dk_py_torch, d_get_device), 0},
};

/* The name of attribute i on torch's tensor base: its own or, where that is absent, its alt. */
static const char *dk__torch_attr_name(PyObject *base, size_t i)
{
    const char *name = dk__torch_attrs[i].name;
    if (dk__torch_attrs[i].alt && !PyObject_HasAttrString(base, name)) name = dk__torch_attrs[i].alt;
    return name;
}

/* torch dtypes with a DLPack code dkit's kernels may understand (dk_tensor.h); any other dtype
 * takes the protocol path and gets torch's own DLPack code. */
static const struct {
    const char *name;
    uint8_t code, bits;
} dk__torch_dtypes[DK_PY_TORCH_DTYPES] = {
    {"float32", kDLFloat, 32}, {"float64", kDLFloat, 64}, {"float16", kDLFloat, 16}, {"bfloat16", kDLBfloat, 16},
    {"int32", kDLInt, 32},     {"int64", kDLInt, 64},     {"int8", kDLInt, 8},       {"int16", kDLInt, 16},
    {"uint8", kDLUInt, 8},     {"bool", kDLBool, 8},
};

/* dkit._torch_reader's function, if that module was built and loads (it refuses a torch other
 * than the one it was built for); silently none otherwise (Note [torch reader]). With
 * DKIT_TORCH_READER=0 in the environment it is not loaded even where it was built: `make test`
 * runs the Python suite once that way (test-python-noreader), because correctness must never
 * depend on the reader. */
static void dk__torch_reader_load(dk_py_torch *t)
{
    const char *env = getenv("DKIT_TORCH_READER");
    if (env && strcmp(env, "0") == 0) return;
    PyObject *m = PyImport_ImportModule("dkit._torch_reader");
    t->reader_capsule = m ? PyObject_GetAttrString(m, "reader") : NULL;
    Py_XDECREF(m);
    const dk_py_torch_reader *r = t->reader_capsule
                                      ? PyCapsule_GetPointer(t->reader_capsule, DK_PY_TORCH_READER_CAPSULE)
                                      : NULL;
    if (r && r->abi == DK_PY_TORCH_READER_ABI) {
        t->reader = r;
        t->use_reader = 1;
    } else {
        Py_CLEAR(t->reader_capsule);
    }
    PyErr_Clear();
}

static int dk__torch_fill(dk_py_torch *t, PyObject *torch)
{
    PyObject *c = PyObject_GetAttrString(torch, "_C");
    if (!c) return -1;
    /* torch.Tensor's C base: torch._C.TensorBase from torch 2.1 on (_TensorBase before) */
    PyObject *base = PyObject_HasAttrString(c, "TensorBase") ? PyObject_GetAttrString(c, "TensorBase")
                                                             : PyObject_GetAttrString(c, "_TensorBase");
    PyObject *tensor = PyObject_GetAttrString(torch, "Tensor");
    t->to_dlpack = PyObject_GetAttrString(c, "_to_dlpack");
    t->tf_disabled = PyObject_GetAttrString(c, "_disabled_torch_function_impl");
    Py_DECREF(c);
    int rc = -1;
    if (!base || !tensor || !PyType_Check(tensor) || !t->to_dlpack || !t->tf_disabled) goto done;
    t->tensor = (PyTypeObject *)Py_NewRef(tensor);
    if (!(t->tf_default = dk__unwrap_method(tensor, "__torch_function__"))) goto done;
    if (!(t->td_default = dk__unwrap_method(tensor, "__torch_dispatch__"))) goto done;
    if (!(t->dlpack_fn = dk__unwrap_method(tensor, "__dlpack__"))) goto done;
    for (size_t i = 0; i < DK_COUNTOF(dk__torch_attrs); i++) {
        PyObject *d = PyObject_GetAttrString(base, dk__torch_attr_name(base, i));
        if (!d) goto done;
        *(PyObject **)((char *)t + dk__torch_attrs[i].offset) = d;
        PyTypeObject *want = dk__torch_attrs[i].getset ? &PyGetSetDescr_Type : &PyMethodDescr_Type;
        if (Py_TYPE(d) != want) goto done; /* a torch that changed shape: no fast path */
    }
    for (int i = 0; i < DK_PY_TORCH_DTYPES; i++) {
        if (!(t->dtypes[i] = PyObject_GetAttrString(torch, dk__torch_dtypes[i].name))) goto done;
        t->dl_dtypes[i] = (DLDataType){dk__torch_dtypes[i].code, dk__torch_dtypes[i].bits, 1};
    }
    /* a ROCm torch calls its GPU tensors "cuda"; DLPack calls them ROCm */
    PyObject *version = PyObject_GetAttrString(torch, "version");
    PyObject *hip = version ? PyObject_GetAttrString(version, "hip") : NULL;
    t->gpu_type = hip && hip != Py_None ? kDLROCM : kDLCUDA;
    Py_XDECREF(version);
    Py_XDECREF(hip);
    PyErr_Clear();
    dk__torch_reader_load(t);
    rc = 0;
done:
    Py_XDECREF(base);
    Py_XDECREF(tensor);
    return rc;
}

/* Finds torch's entry points if torch is imported. dkit never imports torch: a process that has
 * not imported it holds no torch tensors. Failure is silent (no fast path; the next
 * classification tries again) because the protocol path works without any of this. */
static void dk__torch_lookup(dk_py_state *s)
{
    if (s->torch.found) return;
    PyObject *name = PyUnicode_FromString("torch");
    PyObject *torch = name ? PyImport_GetModule(name) : NULL;
    Py_XDECREF(name);
    /* Filled into a local copy and published whole: the fill allocates, so the GC (and any
     * __del__ it runs, which may call a dkit op and get here again) can run in the middle. A
     * fill into the state itself could then be overwritten (leaking) or cleared half-way by the
     * nested one, and `found` set over NULL descriptors. */
    dk_py_torch t;
    memset(&t, 0, sizeof t);
    if (torch && torch != Py_None && dk__torch_fill(&t, torch) == 0 && !s->torch.found) {
        t.found = 1;
        s->torch = t;
    } else {
        dk__torch_clear(&t); /* a partial fill, or a nested lookup published first */
    }
    Py_XDECREF(torch);
    PyErr_Clear();
}

int dk_py_torch_reader_use(dk_py_state *s, int on)
{
    dk__torch_lookup(s);
    if (!s->torch.found || !s->torch.reader) return -1;
    if (on >= 0) s->torch.use_reader = on;
    return s->torch.use_reader;
}

/* DK_PY_PROD_TORCH when `tp` inherits everything the fast path reads and relies on from
 * torch.Tensor; -1 for anything else, which is a protocol producer: a subclass overriding
 * __torch_function__ sees its __dlpack__ called, as it would from any DLPack consumer. */
static int dk__torch_kind(dk_py_state *s, PyTypeObject *tp)
{
    dk__torch_lookup(s);
    dk_py_torch *t = &s->torch;
    if (!t->found || !PyType_IsSubtype(tp, t->tensor)) return -1;
    if (tp == t->tensor) return DK_PY_PROD_TORCH;
    /* Each lookup's error is cleared before the next call: the C-API must not be called with an
     * exception set. A failed lookup (NULL) never equals torch's object, so the type is not plain. */
    PyObject *tf = dk__unwrap_method((PyObject *)tp, "__torch_function__");
    PyErr_Clear();
    int plain = tf && (tf == t->tf_default || tf == t->tf_disabled);
    Py_XDECREF(tf);
    static const char *const same_as_tensor[] = {"__torch_dispatch__", "__dlpack__"};
    PyObject *const want[] = {t->td_default, t->dlpack_fn};
    for (size_t i = 0; plain && i < DK_COUNTOF(same_as_tensor); i++) {
        PyObject *f = dk__unwrap_method((PyObject *)tp, same_as_tensor[i]);
        PyErr_Clear();
        plain = f == want[i];
        Py_XDECREF(f);
    }
    for (size_t i = 0; plain && i < DK_COUNTOF(dk__torch_attrs); i++) {
        PyObject *d = PyObject_GetAttrString((PyObject *)tp, dk__torch_attr_name((PyObject *)tp, i));
        PyErr_Clear();
        plain = d == *(PyObject **)((char *)t + dk__torch_attrs[i].offset);
        Py_XDECREF(d);
    }
    return plain ? DK_PY_PROD_TORCH : -1;
}

/* A getset descriptor's value for obj, without the attribute lookup. */
static inline PyObject *dk__get(PyObject *descr, PyObject *obj)
{
    return Py_TYPE(descr)->tp_descr_get(descr, obj, (PyObject *)Py_TYPE(obj));
}

/* obj.<method>(), through the method descriptor. */
static inline PyObject *dk__call0(PyObject *descr, PyObject *obj) { return PyObject_Vectorcall(descr, &obj, 1, NULL); }

/* Reads a torch tuple of ints (torch.Size or stride()) into dst. These come from torch's
 * getters, which a __torch_function__ mode may answer with anything: a value that is not ndim
 * ints is an error (with an exception set, always). */
static int dk__read_dims(dk_py_state *s, PyObject *tuple, int64_t *dst, int ndim, const char *what, const char *op,
                         const char *arg)
{
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != ndim) {
        dk_py_raise_fmt(s, DK_ETYPE, "%s: parameter '%s': the tensor's %s is %R, not %d ints", op, arg, what, tuple,
                        ndim);
        return -1;
    }
    for (int i = 0; i < ndim; i++) {
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
        if (v == -1 && PyErr_Occurred()) return -1;
        dst[i] = (int64_t)v;
    }
    return 0;
}

/* A lazily negated view (torch's negative bit, e.g. x.conj().imag or x._neg_view()) holds its
 * values un-negated in memory; read as memory, it would give silently wrong results. */
static int dk__refuse_neg(dk_py_state *s, const char *op, const char *arg)
{
    dk_py_raise_fmt(s, DK_EINVAL,
                    "%s: parameter '%s' is a lazily negated view (torch's negative bit is set), whose memory "
                    "holds the values un-negated; pass .resolve_neg() of it",
                    op, arg);
    return -1;
}

/* 0: imported; -1: error; 1: not for this path, use the protocol (Note [torch fast path]). */
static int dk__import_torch(dk_py_state *s, PyObject *obj, int writable, const char *op, const char *arg,
                            dk_py_owners *owners, DLTensor **out)
{
    dk_py_torch *t = &s->torch;
    dk_py_view *view = &owners->v[owners->nviews];
    PyObject *holder; /* what keeps the memory alive (the fast path's Lifetime) */
    void *keep = NULL;
    if (t->reader && t->use_reader) {
        int r = t->reader->read(obj, writable, DK_PY_VIEW_NDIM, &view->t, view->dims, view->dims + DK_PY_VIEW_NDIM,
                                &keep);
        if (r == 0) {
            holder = Py_NewRef(obj);
            goto done;
        }
        if (r == DK_PY_TORCH_NEG) return dk__refuse_neg(s, op, arg);
        if (r == DK_PY_TORCH_TRACING) {
            dk_py_raise_fmt(s, DK_ENOTIMPL,
                            "%s: torch.jit.trace cannot record a dkit call made outside a torch op (the trace "
                            "would keep only its output's allocation): call torch.ops.dkit.<op> in the traced "
                            "code, or use torch.jit.script, which compiles dkit's calls to those ops",
                            op);
            return -1;
        }
        if (r == DK_PY_TORCH_SHORT) {
            dk_py_raise_fmt(s, DK_EBUFFER,
                            "%s: parameter '%s' has elements past the end of its storage (its storage was "
                            "resized or freed under it)",
                            op, arg);
            return -1;
        }
    }
    PyObject *v = dk__get(t->d_is_cpu, obj);
    if (!v) return -1;
    int cpu = v == Py_True;
    Py_DECREF(v);
    DLDevice device = {kDLCPU, 0};
    if (!cpu) { /* Note [torch fast path on a GPU] */
        if (!(v = dk__get(t->d_is_cuda, obj))) return -1;
        const int gpu = v == Py_True;
        Py_DECREF(v);
        if (!gpu) return 1;
        if (!(v = dk__call0(t->d_get_device, obj))) return -1;
        const long long id = PyLong_AsLongLong(v);
        Py_DECREF(v);
        if (id == -1 && PyErr_Occurred()) return -1;
        if (id < 0 || id > INT32_MAX) return 1;
        device.device_type = (DLDeviceType)t->gpu_type;
        device.device_id = (int32_t)id;
        const int same = dk_py_on_framework_stream(s, obj, device, owners, op, arg);
        if (same <= 0) return same < 0 ? -1 : 1;
    }
    if (writable) {
        if (!(v = dk__get(t->d_requires_grad, obj))) return -1;
        int tracked = v == Py_True;
        Py_DECREF(v);
        if (tracked) return 1;
    }
    if (!(v = dk__get(t->d_dtype, obj))) return -1;
    int d = 0;
    while (d < DK_PY_TORCH_DTYPES && t->dtypes[d] != v) d++;
    Py_DECREF(v);
    if (d == DK_PY_TORCH_DTYPES) return 1;
    if (!(v = dk__call0(t->d_is_neg, obj))) return -1;
    int neg = v == Py_True;
    Py_DECREF(v);
    if (neg) return dk__refuse_neg(s, op, arg);

    PyObject *shape = dk__get(t->d_shape, obj);
    if (!shape) return -1;
    Py_ssize_t ndim = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : -1;
    if (ndim < 0 || ndim > DK_PY_VIEW_NDIM) {
        Py_DECREF(shape);
        if (!cpu) return 1; /* the protocol, with its stream */
        goto capsule;
    }
    int rc = dk__read_dims(s, shape, view->dims, (int)ndim, "shape", op, arg);
    Py_DECREF(shape);
    if (rc < 0) return -1;
    PyObject *strides = dk__call0(t->d_stride, obj);
    if (!strides) {
        PyErr_Clear(); /* sparse CSR/CSC/BSR/BSC: no strides; the protocol raises torch's own error */
        return 1;
    }
    rc = dk__read_dims(s, strides, view->dims + DK_PY_VIEW_NDIM, (int)ndim, "stride()", op, arg);
    Py_DECREF(strides);
    if (rc < 0) return -1;
    PyObject *ptr = dk__call0(t->d_data_ptr, obj);
    if (!ptr) {
        /* No storage: sparse COO and mkldnn (whose stride() answers anyway), nested, functorch's
         * wrappers. The protocol raises torch's own error ("layout other than torch.strided"). */
        PyErr_Clear();
        return 1;
    }
    void *data = PyLong_AsVoidPtr(ptr);
    Py_DECREF(ptr);
    if (!data && PyErr_Occurred()) return -1;
    /* NULL data: refused below, or no elements to read; torch will not bind a null storage */
    holder = data ? dk__call0(t->d_storage, obj) : Py_NewRef(obj);
    if (!holder) {
        PyErr_Clear(); /* no storage to hold here: the protocol's capsule holds one */
        return 1;
    }

    view->t.data = data; /* data_ptr() already includes the storage offset */
    view->t.device = device;
    view->t.ndim = (int32_t)ndim;
    view->t.dtype = t->dl_dtypes[d];
    view->t.shape = view->dims;
    view->t.strides = view->dims + DK_PY_VIEW_NDIM;
    view->t.byte_offset = 0;
done:;
    dk_py_owner *o = &owners->o[owners->n];
    o->ref = holder;
    o->managed = NULL;
    o->versioned = 0;
    o->keep = keep;
    o->unkeep = keep ? t->reader->release : NULL;
    owners->n++;                                                   /* owned from here on, refused or not */
    if (dk__refuse_null_data(s, &view->t, op, arg) < 0) return -1; /* Note [NULL data] */
    owners->nviews++;
    *out = &view->t;
    return 0;

capsule:;
    /* High rank: torch's own DLPack export (CPU, so no stream is involved). */
    PyObject *cap = PyObject_Vectorcall(t->to_dlpack, &obj, 1, NULL);
    if (!cap) return -1;
    rc = dk__take_capsule(s, cap, writable, op, arg, owners, out);
    Py_DECREF(cap);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* The protocol                                                                               */

/*
 * Note [Producer errors]
 * A producer that cannot export a tensor raises its own exception from __dlpack_device__ or
 * __dlpack__: NumPy's bare BufferError for a big-endian array, torch's RuntimeError for a
 * quantized tensor, its ValueError for a meta tensor. Its text names neither the op nor the
 * parameter, and its type is not a dkit error, so it is raised again as a dkit error that says
 * which argument of which op it was, what that argument is (type, dtype, device), and the
 * producer's own words, chained to the original (__cause__). torch tensors that dkit can never
 * read get the status of what is wrong with them: a quantized dtype is a DkitTypeError (pass
 * .dequantize()), a meta tensor (no memory) a DkitNotImplementedError, as torchvision raises
 * NotImplementedError for a device it has no kernel for. Anything else is a DkitBufferError.
 * Exceptions that are not errors of the export (KeyboardInterrupt, MemoryError) and dkit's own
 * errors pass unchanged.
 */

/* str(getattr(obj, name)), or NULL (no exception) when obj has no such attribute. */
static PyObject *dk__attr_str(PyObject *obj, const char *name)
{
    PyObject *a = PyObject_GetAttrString(obj, name);
    PyObject *str = a ? PyObject_Str(a) : NULL;
    Py_XDECREF(a);
    if (!str) PyErr_Clear();
    return str;
}

static int dk__torch_is(PyObject *obj, const char *attr, const char *value)
{
    PyObject *a = PyObject_GetAttrString(obj, attr);
    int r = 0;
    if (a && !value) {
        r = PyObject_IsTrue(a) == 1;
    } else if (a) {
        PyObject *str = PyObject_Str(a);
        r = str && PyUnicode_CompareWithASCIIString(str, value) == 0;
        Py_XDECREF(str);
    }
    Py_XDECREF(a);
    PyErr_Clear();
    return r;
}

/* With the producer's exception set: replaces it (Note [Producer errors]). Returns -1. */
static int dk__producer_error(dk_py_state *s, PyObject *obj, const char *op, const char *arg)
{
    PyObject *value;
    if (!dk_py_fetch_foreign(s, &value)) return -1;
    dk_status st = DK_EBUFFER;
    const char *hint = "";
    if (s->torch.found && PyObject_TypeCheck(obj, s->torch.tensor)) {
        PyObject *dev = PyObject_GetAttrString(obj, "device");
        int meta = dev && dk__torch_is(dev, "type", "meta");
        Py_XDECREF(dev);
        PyErr_Clear();
        if (dk__torch_is(obj, "is_quantized", NULL)) {
            st = DK_ETYPE;
            hint = "; dkit does not compute with quantized tensors: pass .dequantize() of it";
        } else if (meta) {
            st = DK_ENOTIMPL;
            hint = "; a meta tensor has no memory, and dkit has no kernels for the meta device";
        }
    }
    PyObject *dtype = dk__attr_str(obj, "dtype"), *device = dk__attr_str(obj, "device");
    PyObject *what = PyUnicode_FromFormat("%s%s%V%s%V", Py_TYPE(obj)->tp_name, dtype ? ", dtype " : "", dtype, "",
                                          device ? ", device " : "", device, "");
    Py_XDECREF(dtype);
    Py_XDECREF(device);
    if (what) {
        dk_py_raise_fmt(s, st, "%s: parameter '%s' (%U) cannot be exported through DLPack by its producer: %S%s", op,
                        arg, what, value, hint);
        Py_DECREF(what);
    }
    dk_py_set_cause(value);
    return -1;
}

/* __dlpack_device__()[0] (and [1] in *id), or -1 when the producer has no such method (then no
 * stream is passed). Returns -2 with an exception set on error. */
static int64_t dk__device_type(dk_py_state *s, PyObject *obj, const char *op, const char *arg, int64_t *id)
{
    *id = 0;
    /* argv[0] is the scratch slot PY_VECTORCALL_ARGUMENTS_OFFSET lets the callee overwrite;
     * passing &obj with that flag would let it write to whatever precedes obj on the C stack. */
    PyObject *argv[2] = {NULL, obj};
    PyObject *dev = PyObject_VectorcallMethod(s->s_dlpack_device, argv + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (!dev) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return dk__producer_error(s, obj, op, arg), -2;
        PyErr_Clear();
        return -1;
    }
    int64_t type = -1;
    if (PyTuple_Check(dev) && PyTuple_GET_SIZE(dev) == 2) {
        type = PyLong_AsLongLong(PyTuple_GET_ITEM(dev, 0)); /* IntEnums are ints */
        if (type >= 0) {
            const long long i = PyLong_AsLongLong(PyTuple_GET_ITEM(dev, 1));
            if (i < 0 || i > INT32_MAX) type = -1; /* refused below, as a malformed device */
            else *id = i;
        }
    }
    Py_DECREF(dev);
    if (type < 0) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError) ||
            PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            dk_py_raise_fmt(s, DK_ETYPE,
                            "%s: parameter '%s': __dlpack_device__() must return (device_type, device_id) with "
                            "a non-negative device_type and a device_id in [0, 2^31)",
                            op, arg);
        }
        return -2;
    }
    return type;
}

/* obj.__dlpack__(**kw), with `stream=` first when has_stream and `max_version=` when versioned. */
static PyObject *dk__call_dlpack(dk_py_state *s, PyObject *obj, int versioned, int has_stream, long stream)
{
    PyObject *argv[4]; /* argv[0] is scratch space PY_VECTORCALL_ARGUMENTS_OFFSET allows the callee */
    PyObject *stream_obj = NULL;
    int n = 1;
    argv[n++] = obj;
    if (has_stream) {
        stream_obj = PyLong_FromLong(stream);
        if (!stream_obj) return NULL;
        argv[n++] = stream_obj;
    }
    if (versioned) argv[n++] = s->max_version;
    PyObject *kw = versioned ? (has_stream ? s->kw_stream_max_version : s->kw_max_version)
                             : (has_stream ? s->kw_stream : NULL);
    PyObject *cap = PyObject_VectorcallMethod(s->s_dlpack, argv + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, kw);
    Py_XDECREF(stream_obj);
    return cap;
}

static int dk__import_protocol(dk_py_state *s, PyObject *obj, int kind, int writable, const char *op, const char *arg,
                               dk_py_owners *owners, DLTensor **out)
{
    if (kind < 0 && !PyObject_HasAttr(obj, s->s_dlpack)) {
        dk_py_raise_fmt(s, DK_ETYPE,
                        "%s: parameter '%s' must be a tensor (an object with __dlpack__, or a DLPack capsule), got %s",
                        op, arg, Py_TYPE(obj)->tp_name);
        return -1;
    }
    int64_t dev_id;
    int64_t dev = dk__device_type(s, obj, op, arg, &dev_id);
    if (dev == -2) return -1;
    long stream = 0;
    int has_stream = dev >= 0 ? dk_py_consumer_stream(s, obj, dev, dev_id, owners, op, arg, &stream) : 0;
    if (has_stream < 0) return -1; /* Note [The consumer's stream] in dk_pystream.c */

    PyObject *cap = NULL;
    if (kind != DK_PY_PROD_LEGACY) {
        cap = dk__call_dlpack(s, obj, 1, has_stream, stream);
        if (!cap) {
            if (kind == DK_PY_PROD_VERSIONED || !PyErr_ExceptionMatches(PyExc_TypeError))
                return dk__producer_error(s, obj, op, arg);
            PyErr_Clear(); /* a producer from before DLPack 1.0: no max_version keyword */
        } else if (kind < 0) {
            dk__cache_add(s, Py_TYPE(obj), DK_PY_PROD_VERSIONED);
        }
    }
    if (!cap) {
        cap = dk__call_dlpack(s, obj, 0, has_stream, stream);
        if (!cap) return dk__producer_error(s, obj, op, arg);
        if (kind < 0) dk__cache_add(s, Py_TYPE(obj), DK_PY_PROD_LEGACY);
    }
    int rc;
    if (!PyCapsule_CheckExact(cap)) {
        dk_py_raise_fmt(s, DK_ETYPE, "%s: parameter '%s': __dlpack__() returned %s, not a capsule", op, arg,
                        Py_TYPE(cap)->tp_name);
        rc = -1;
    } else {
        rc = dk__take_capsule(s, cap, writable, op, arg, owners, out);
    }
    Py_DECREF(cap); /* consumed: owners holds its own reference; refused: its destructor frees it */
    return rc;
}

/*
 * Note [Inputs that require grad]
 * torch's __dlpack__ refuses a tensor that requires grad ("Can't export tensors that require
 * gradient, use tensor.detach()"), on every torch version and device. dkit only reads its
 * inputs, and the autograd wrapper around a kernel (dkit/_frameworks/torch.py) records the graph
 * itself, so an input torch tensor (plain or a subclass) that requires grad is exported as its
 * .detach(): the same memory, without the autograd history. The CPU fast path reads such tensors
 * directly (Note [torch fast path]); this is the path of every other device (CUDA, ROCm), of
 * CPU tensors the fast path declines, and of a torch whose getters changed shape. An output that
 * requires grad is never detached: dkit refuses to write into a tensor autograd tracks, and
 * torch's own refusal reaches the caller. *out is NULL (and nothing raised) for anything else.
 */
static int dk__torch_detached(dk_py_state *s, PyObject *obj, PyObject **out)
{
    *out = NULL;
    dk_py_torch *t = &s->torch;
    if (!t->found || !PyObject_TypeCheck(obj, t->tensor)) return 0;
    PyObject *v = dk__get(t->d_requires_grad, obj);
    if (!v) return -1;
    const int tracked = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (tracked <= 0) return tracked;
    *out = PyObject_CallMethod(obj, "detach", NULL);
    return *out ? 0 : -1;
}

/* The producer kind of obj's type (a dk_py_producer_kind), or -1 when not known yet; learned
 * once per type (Note [Producer cache]). */
static int dk__kind_of(dk_py_state *s, PyTypeObject *tp)
{
    int kind = dk__cache_find(s, tp);
    if (kind < 0) {
        kind = dk__torch_kind(s, tp);
        if (kind >= 0) dk__cache_add(s, tp, (dk_py_producer_kind)kind);
    }
    return kind;
}

int dk_py_dlpack_reads_late(dk_py_state *s, PyObject *obj)
{
    if (PyCapsule_CheckExact(obj)) return 1;
    const int kind = dk__kind_of(s, Py_TYPE(obj));
    return kind == DK_PY_PROD_TORCH && s->torch.reader && s->torch.use_reader;
}

int dk_py_dlpack_import(dk_py_state *s, PyObject *obj, int writable, const char *op, const char *arg,
                        dk_py_owners *owners, DLTensor **out, int *ran_python)
{
    if (PyCapsule_CheckExact(obj)) return dk__take_capsule(s, obj, writable, op, arg, owners, out);
    int kind = dk__kind_of(s, Py_TYPE(obj));
    if (kind == DK_PY_PROD_TORCH) {
        /* the getters may call a __torch_function__ mode's Python code */
        if (!(s->torch.reader && s->torch.use_reader)) *ran_python = 1;
        int rc = dk__import_torch(s, obj, writable, op, arg, owners, out);
        if (rc == 0 && (*out)->device.device_type != kDLCPU) *ran_python = 1; /* getters and the stream's */
        if (rc <= 0) return rc;
        kind = -1; /* asked each time: torch >= 2.4 takes max_version, 1.13 raises TypeError */
    }
    *ran_python = 1; /* __dlpack_device__ and __dlpack__ are the producer's code */
    if (kind < 0 && s->torch.found && PyObject_TypeCheck(obj, s->torch.tensor)) {
        /* Note [Meta tensors in the core's calls]: asked only of tensors the fast path declined */
        PyObject *v = dk__get(s->torch.d_is_meta, obj);
        if (!v) return -1;
        const int meta = v == Py_True;
        Py_DECREF(v);
        if (meta) return DK_PY_ABSTRACT;
    }
    PyObject *detached = NULL;
    if (!writable && dk__torch_detached(s, obj, &detached) < 0) return -1;
    const int rc = dk__import_protocol(s, detached ? detached : obj, kind, writable, op, arg, owners, out);
    Py_XDECREF(detached); /* a consumed capsule holds the tensor's memory itself */
    return rc;
}

int dk_py_dlpack_recheck(dk_py_state *s, PyObject *obj, const DLTensor *t, const char *op, const char *arg)
{
    dk_py_torch *tt = &s->torch;
    if (!tt->found || !PyObject_TypeCheck(obj, tt->tensor)) return 0; /* not torch: nothing to ask */
    void *now = NULL;
    if (tt->reader) {
        DLTensor v;
        int64_t dims[2 * DK_PY_VIEW_NDIM];
        void *keep = NULL;
        const int r = tt->reader->read(obj, 0, DK_PY_VIEW_NDIM, &v, dims, dims + DK_PY_VIEW_NDIM, &keep);
        if (r == DK_PY_TORCH_SHORT) {
            now = NULL; /* its storage shrank under it: lost */
        } else if (r != 0) {
            return 0; /* not readable here (another device, a high rank): its capsule holds it */
        } else {
            now = v.data;
            tt->reader->release(keep);
        }
    } else {
        /* Without the reader, torch's getter: a mode's Python code may answer; what it says is all
         * there is to go by (Note [Conversion order]). */
        PyObject *ptr = dk__call0(tt->d_data_ptr, obj);
        if (!ptr) {
            PyErr_Clear();
            return 0;
        }
        now = PyLong_AsVoidPtr(ptr);
        Py_DECREF(ptr);
        if (PyErr_Occurred()) PyErr_Clear();
    }
    if (now == (char *)t->data + t->byte_offset || dk_tensor_numel(t) == 0) return 0;
    dk_py_raise_fmt(s, DK_ERUNTIME,
                    "%s: parameter '%s' lost the memory dkit read it from while the call's other arguments "
                    "were converted (Python code they ran, e.g. an __index__ or a __dlpack__, freed or replaced "
                    "it); the call was not made",
                    op, arg);
    return -1;
}

int dk_py_dlpack_take(dk_py_state *s, PyObject *obj, const char *op, const char *arg, void **managed, int *versioned)
{
    dk_py_owners owners;
    owners.n = owners.nviews = owners.nstreams = 0;
    DLTensor *t;
    int rc;
    if (PyCapsule_CheckExact(obj)) {
        rc = dk__take_capsule(s, obj, 0, op, arg, &owners, &t);
    } else {
        int kind = dk__cache_find(s, Py_TYPE(obj));
        rc = dk__import_protocol(s, obj, kind == DK_PY_PROD_TORCH ? -1 : kind, 0, op, arg, &owners, &t);
    }
    dk_py_restore_streams(&owners); /* no kernel runs here */
    if (rc < 0) return -1;
    /* The capsule is renamed "used_*": dropping it leaves the managed tensor to the caller. */
    *managed = owners.o[0].managed;
    *versioned = owners.o[0].versioned;
    Py_DECREF(owners.o[0].ref);
    return 0;
}

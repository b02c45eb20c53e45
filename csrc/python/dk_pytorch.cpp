/*
 * dk_pytorch.cpp — dkit._torch_reader: reads torch tensors for dkit._C without Python calls
 * (Note [torch reader] in dk_pytorch.h).
 *
 * The one C++ file of dkit, because torch's tensor internals have only a C++ interface. It uses
 * the raw CPython C-API for the module (no pybind11 code; torch's headers include pybind11's, we
 * call none of it) and exports a single C function through a capsule. No C++ exception leaves
 * it: anything unexpected answers "take the general path".
 */
#include "dk_pytorch.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/version.h>

#include <type_traits>
#include <utility>

namespace {

/* The dtypes of _C's torch table (dk_pydlpack.c); anything else takes the general path. */
bool dk_dl_dtype(c10::ScalarType st, DLDataType *out)
{
    uint8_t code, bits;
    switch (st) {
    case c10::ScalarType::Float: code = kDLFloat, bits = 32; break;
    case c10::ScalarType::Double: code = kDLFloat, bits = 64; break;
    case c10::ScalarType::Half: code = kDLFloat, bits = 16; break;
    case c10::ScalarType::BFloat16: code = kDLBfloat, bits = 16; break;
    case c10::ScalarType::Int: code = kDLInt, bits = 32; break;
    case c10::ScalarType::Long: code = kDLInt, bits = 64; break;
    case c10::ScalarType::Char: code = kDLInt, bits = 8; break;
    case c10::ScalarType::Short: code = kDLInt, bits = 16; break;
    case c10::ScalarType::Byte: code = kDLUInt, bits = 8; break;
    case c10::ScalarType::Bool: code = kDLBool, bits = 8; break;
    default: return false;
    }
    out->code = code;
    out->bits = bits;
    out->lanes = 1;
    return true;
}

/*
 * Note [Eager calls under torch.jit.trace]
 * torch.jit.trace records the torch ops a function runs. dkit's eager path is not one (it calls
 * dkit._C directly, Note [dkit ops in torch] in dkit/_torch_library.py), so a trace of
 * dkit.ops.roi_align would record only the allocation of its output, and the traced model would
 * return that memory uninitialised, with at most a TracerWarning from check_trace. So a torch
 * tensor read while this thread is being traced is refused with an error that says what to do
 * (call torch.ops.dkit.<op>, which the tracer records, or script the module). Inside a torch op
 * (torch.ops.dkit.*, called by the tracer or a scripted model), the tracer has excluded its own
 * dispatch key: that call is recorded, and reads as usual. The check is two thread-local reads.
 * Without the reader (torch's C++ headers absent) the refusal does not happen.
 */
static bool dk_traced_outside_an_op() noexcept
{
    return torch::jit::tracer::isTracing() && !c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Tracer);
}

/* Whether TensorImpl has mutable_data() (torch 2.x, with copy-on-write storages). */
template <class T, class = void> struct dk_has_mutable_data : std::false_type {};
template <class T>
struct dk_has_mutable_data<T, std::void_t<decltype(std::declval<T &>().mutable_data())>> : std::true_type {};

/* The tensor's first element. torch 2.x's data() is const: a storage may be a lazy
 * (copy-on-write) clone shared with another tensor, and a writer must call mutable_data(), which
 * materialises its own copy first, as a torch op's output would. torch 1.13 has only data(). */
template <class Impl> void *dk_data(const Impl *impl, int writable)
{
    if constexpr (dk_has_mutable_data<Impl>::value) {
        if (writable) return const_cast<Impl *>(impl)->mutable_data();
    }
    return const_cast<void *>(static_cast<const void *>(impl->data()));
}

int dk_read(PyObject *obj, int writable, int max_ndim, DLTensor *t, int64_t *shape, int64_t *strides,
            void **keep) noexcept
{
    try {
        if (!THPVariable_Check(obj)) return 1;
        if (dk_traced_outside_an_op()) return DK_PY_TORCH_TRACING;
        const c10::TensorImpl *impl = THPVariable_Unpack(obj).unsafeGetTensorImpl();
        /* Sparse, mkldnn, nested, meta, functorch wrappers and Python-dispatch tensors all fail
         * one of these; their errors are torch's own, raised on the general path. */
        if (impl->device_type() != c10::DeviceType::CPU || impl->layout() != c10::kStrided || !impl->has_storage() ||
            impl->is_python_dispatch() || impl->is_conj())
            return 1;
        if (impl->is_neg()) return DK_PY_TORCH_NEG;
        if (writable && impl->requires_grad()) return 1;
        caffe2::TypeMeta dtype = impl->dtype(); /* toScalarType() is not const in torch 1.13 */
        if (!dk_dl_dtype(dtype.toScalarType(), &t->dtype)) return 1;
        const int64_t nd = impl->dim();
        if (nd > max_ndim) return 1;
        const c10::IntArrayRef sz = impl->sizes(), st = impl->strides();
        for (int64_t d = 0; d < nd; ++d) {
            shape[d] = sz[d];
            strides[d] = st[d];
        }
        /* Every element must lie inside the storage: Python code can shrink a storage under a
         * tensor (storage().resize_(n)) and leave sizes that reach past its end. */
        int64_t reach = 0; /* the highest element offset from the first */
        bool empty = false;
        for (int64_t d = 0; d < nd; ++d) {
            if (sz[d] == 0) empty = true;
            if (st[d] < 0) return 1; /* torch has none; the general path words the error */
            reach += (sz[d] - 1) * st[d];
        }
        if (!empty) {
            const int64_t need = (impl->storage_offset() + reach + 1) * (int64_t)dtype.itemsize();
            /* (a storage without memory is _C's "no memory" refusal, Note [NULL data]) */
            if (impl->storage().data() && need > (int64_t)impl->storage().nbytes()) return DK_PY_TORCH_SHORT;
        }
        t->data = dk_data(impl, writable); /* includes the storage offset, like Tensor.data_ptr() */
        t->device.device_type = kDLCPU;
        t->device.device_id = 0;
        t->ndim = (int32_t)nd;
        t->shape = shape;
        t->strides = strides;
        t->byte_offset = 0;
        /* The storage, not only the tensor object, must outlive the call: Python code run
         * while _C converts later arguments, or another thread once the GIL is released, may
         * give the tensor other memory (set_(), .data =) and free this one. */
        c10::StorageImpl *storage = impl->storage().unsafeGetStorageImpl();
        c10::raw::intrusive_ptr::incref(storage);
        *keep = storage;
        return 0;
    } catch (...) {
        return 1;
    }
}

void dk_release(void *keep) noexcept { c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl *>(keep)); }

const dk_py_torch_reader dk_reader = {DK_PY_TORCH_READER_ABI, dk_read, dk_release};

/* The running torch must be the one whose headers this file was compiled with. */
int dk_exec(PyObject *module)
{
    PyObject *torch = PyImport_ImportModule("torch");
    if (!torch) return -1;
    PyObject *v = PyObject_GetAttrString(torch, "__version__");
    Py_DECREF(torch);
    if (!v) return -1;
    const char *running = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : nullptr;
    const char *built = TORCH_VERSION;
    const size_t n = strlen(built);
    /* "1.13.0" matches "1.13.0", "1.13.0a0", "1.13.0+cpu"; not "1.13.1" or "1.13.10". */
    const bool same = running && strncmp(running, built, n) == 0 && !(running[n] >= '0' && running[n] <= '9');
    if (!same) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ImportError, "dkit._torch_reader was built for torch %s, but torch %s is running", built,
                         running ? running : "?");
        Py_DECREF(v);
        return -1;
    }
    Py_DECREF(v);
    PyObject *cap = PyCapsule_New(const_cast<dk_py_torch_reader *>(&dk_reader), DK_PY_TORCH_READER_CAPSULE, nullptr);
    if (!cap) return -1;
    if (PyModule_AddObject(module, "reader", cap) < 0) {
        Py_DECREF(cap);
        return -1;
    }
    return PyModule_AddStringConstant(module, "torch_version", built);
}

PyModuleDef_Slot dk_slots[] = {{Py_mod_exec, reinterpret_cast<void *>(dk_exec)}, {0, nullptr}};

PyModuleDef dk_module = {
    PyModuleDef_HEAD_INIT,
    "dkit._torch_reader",
    "Reads torch tensors for dkit._C in C++ (Note [torch reader] in csrc/python/dk_pytorch.h).",
    0,
    nullptr,
    dk_slots,
    nullptr,
    nullptr,
    nullptr,
};

} // namespace

PyMODINIT_FUNC PyInit__torch_reader(void) { return PyModuleDef_Init(&dk_module); }

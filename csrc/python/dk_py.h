/*
 * dk_py.h — what the files of the extension dkit._C share: the module state and the entry points
 * of each part. Private to csrc/python.
 *
 *   dk_pymodule.c      module definition, multi-phase init, module state
 *   dk_pyerrors.c      the exception classes, and raising them from a dk_status
 *   dk_pydlpack.c      DLPack import: producers, capsules, ownership (dk_pydlpack.h)
 *   dk_pystream.c      the stream a GPU tensor is asked for, dkit's current stream for a call
 *   dk_pyops.c         the op callables generated from the registered schemas (_C.ops)
 *   dk_pyintrospect.c  op_names, schema, table, dump, keys, TLS, profile, backends, config
 *   dk_pychecked.c     dlpack_checked: a foreign tensor validated before NumPy or torch reads it
 *   dk_pybackends_at_import.c  the GPU backends and DKIT_BACKENDS, loaded at import
 *   dk_pytorch_order.c torch_sort_ties_: torch.sort's order of equal scores, for dkit.compat
 *   dk_pykernel.c      Python kernels: a Python function as an op's kernel at a device's key
 *   dk_pykernel_tensor.c  KernelTensor: a Python kernel's tensor argument, viewed in place
 *
 * Note [No static PyObject globals]
 * Every Python object the extension keeps (exception types, the op type, interned strings, the
 * torch entry points it found) lives in the module state, so the module can be created more
 * than once (sub-interpreters, importlib.reload) and is visible to the GC through m_traverse.
 * Code reaches the state from a module function's `self`, or from an op callable through its
 * heap type (PyType_GetModuleState), never through a C global.
 */
#ifndef DK_PY_H
#define DK_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "dk_pytorch.h"
#include "dkit.h"

/* How a type hands out its tensors, learned once per type (Note [Producer cache]). */
typedef enum {
    DK_PY_PROD_VERSIONED = 0, /* __dlpack__(max_version=...) works */
    DK_PY_PROD_LEGACY,        /* __dlpack__ refuses max_version with TypeError: call it without */
    DK_PY_PROD_TORCH,         /* torch.Tensor or a subclass overriding nothing dkit relies on: read directly */
} dk_py_producer_kind;

#define DK_PY_TYPE_CACHE 16
#define DK_PY_TORCH_DTYPES 10

typedef struct {
    PyTypeObject *type; /* strong reference; NULL if the entry is free */
    dk_py_producer_kind kind;
} dk_py_type_entry;

/* torch's descriptors and entry points (Note [torch fast path] in dk_pydlpack.c). */
typedef struct {
    int found;             /* torch was imported and everything below is set */
    PyTypeObject *tensor;  /* torch.Tensor */
    PyObject *to_dlpack;   /* torch._C._to_dlpack */
    PyObject *tf_default;  /* torch.Tensor.__torch_function__.__func__ */
    PyObject *tf_disabled; /* torch._C._disabled_torch_function_impl */
    PyObject *td_default;  /* torch.Tensor.__torch_dispatch__ (torch's "disabled" marker) */
    PyObject *dlpack_fn;   /* torch.Tensor.__dlpack__ */
    /* _TensorBase's own descriptors, called directly (a type qualifies only if it inherits them) */
    PyObject *d_is_cpu, *d_requires_grad, *d_dtype, *d_shape, *d_is_meta, *d_is_cuda; /* getset descriptors */
    PyObject *d_data_ptr, *d_stride, *d_is_neg, *d_storage, *d_get_device;            /* method descriptors */
    int gpu_type; /* DLPack device type of torch's "cuda" tensors: kDLCUDA, or kDLROCM (torch.version.hip) */
    PyObject *dtypes[DK_PY_TORCH_DTYPES]; /* torch.float32, ... */
    DLDataType dl_dtypes[DK_PY_TORCH_DTYPES];
    /* dkit._torch_reader's capsule and function, when it is built and matches the running torch
     * (Note [torch reader] in dk_pytorch.h); use_reader turns it off for tests (_C._torch_reader). */
    PyObject *reader_capsule;
    const dk_py_torch_reader *reader;
    int use_reader;
} dk_py_torch;

typedef struct {
    /* Exceptions, indexed by dk_status; exc[DK_OK] is NULL and exc[DK_ERUNTIME] is DkitError,
     * the base of the others. */
    PyObject *exc[DK_STATUS_COUNT];

    PyTypeObject *op_type;      /* dkit._C.Op, the type of every op callable */
    PyTypeObject *checked_type; /* dkit._C.CheckedTensor (dk_pychecked.c) */
    PyObject *ops;              /* the dkit._C.ops module object holding one callable per op */

    /* Interned names and constant arguments of the DLPack exchange, built once. */
    PyObject *s_dlpack;              /* "__dlpack__" */
    PyObject *s_dlpack_device;       /* "__dlpack_device__" */
    PyObject *kw_max_version;        /* ("max_version",) */
    PyObject *kw_stream_max_version; /* ("stream", "max_version") */
    PyObject *kw_stream;             /* ("stream",) */
    PyObject *max_version;           /* (1, 0): the DLPack major/minor dkit understands */

    /* torch, found the first time a type is classified while torch is imported (dkit never
     * imports torch itself). All NULL until then. */
    dk_py_torch torch;

    dk_py_type_entry types[DK_PY_TYPE_CACHE];

    /* type -> callable(device_id) -> the framework's current stream for its tensors on a
     * device with streams (Note [The consumer's stream] in dk_pystream.c); NULL until set. */
    PyObject *stream_getters;
    /* tunable name -> a callable told each new value set through tunable() (dk_pytunables.c) */
    PyObject *tunable_watchers;
    /* torch_sort_ties_' scratch, kept between calls up to a bound (dk_pytorch_order.c); every
     * use holds the GIL */
    void *order_scratch;
    size_t order_scratch_bytes;
    /* dk_pybackends_at_import.c: library path -> how it was loaded; and the libraries that
     * failed to load at import, as (path, origin, reason) */
    PyObject *backend_origins;
    PyObject *backend_failures;
    /* dk_pykernel.c, dk_pykernel_tensor.c: the types of a Python kernel's tensor arguments and
     * of its registrations, and the registrations in force (a list of PythonKernel) */
    PyTypeObject *kernel_tensor_type;
    PyTypeObject *python_kernel_type;
    PyObject *python_kernels;
} dk_py_state;

static inline dk_py_state *dk_py_state_of_module(PyObject *module) { return (dk_py_state *)PyModule_GetState(module); }

/* dk_pyerrors.c */
/* Creates DkitError and its subclasses in the module and its state. */
int dk_py_errors_init(PyObject *module, dk_py_state *s);
/* Raise the exception mapped from `st` with this thread's dk_last_error(); returns NULL. */
PyObject *dk_py_raise(dk_py_state *s, dk_status st);
/* Raise exception `st` with a formatted message; returns NULL. */
PyObject *dk_py_raise_fmt(dk_py_state *s, dk_status st, const char *fmt, ...);
/* The exception now set, normalized, its traceback attached, as a new reference; the error
 * indicator is cleared. NULL when none is set (PyErr_GetRaisedException from Python 3.12). */
PyObject *dk_py_fetch_exception(void);
/* Another library's error, to be raised again as a dkit error that names the op and the
 * parameter: with such an exception set (an Exception that is neither a dkit error nor a
 * MemoryError), takes it into *cause (a new reference), clears it and returns 1; otherwise
 * leaves whatever is set as it is and returns 0. */
int dk_py_fetch_foreign(dk_py_state *s, PyObject **cause);
/* Sets `cause` (stolen) as the __cause__ of the exception now set, as `raise ... from cause`. */
void dk_py_set_cause(PyObject *cause);
/* The status a Python exception maps to, the reverse of dk_py_raise: the first status in the
 * table's order whose builtin exception `exc` is an instance of (a ValueError, DkitValueError
 * included, is DK_EINVAL); DK_ERUNTIME for anything else. */
dk_status dk_py_status_of(PyObject *exc);

/* dk_pyops.c */
int dk_py_ops_init(PyObject *module, dk_py_state *s);
/* Adds a callable to _C.ops for every registered op that has none yet (ops defined by a
 * backend library loaded after import). */
int dk_py_ops_refresh(dk_py_state *s);
/* _shape_only(on=None) -> bool: Note [Shape-only calls] in dk_pyops.c. */
PyObject *dk_py_shape_only(PyObject *m, PyObject *const *args, Py_ssize_t n);

/* dk_pychecked.c */
int dk_py_checked_init(PyObject *module, dk_py_state *s);
/* A "dltensor" capsule owning m: its destructor calls m's deleter unless a consumer took it
 * (renamed it "used_dltensor"). NULL with an exception set on failure, m still the caller's. */
PyObject *dk_py_legacy_capsule(DLManagedTensor *m);
/* dk_pykernel_tensor.c (Note [A Python kernel's tensors]) */
int dk_py_kernel_tensor_init(PyObject *module, dk_py_state *s);
/* A view of argument `arg` of `op`, borrowing t until dk_py_kernel_tensor_expire. */
PyObject *dk_py_kernel_tensor_new(dk_py_state *s, const dk_op *op, int arg, const DLTensor *t);
void dk_py_kernel_tensor_expire(PyObject *o);
/* dk_pykernel.c (Note [Python kernels]) */
int dk_py_kernels_init(PyObject *module, dk_py_state *s);
/* Note [A Python kernel's exception reaches its Python caller]: an op call from Python brackets
 * its GIL-released core call with these; end() pops the bracket and, when the call failed (st),
 * raises its error, chained from the exception a Python kernel raised under it (-1); 0 when the
 * call succeeded. */
typedef struct dk_py_kernel_catch {
    PyObject *exc; /* what a Python kernel raised under the call, or NULL */
    struct dk_py_kernel_catch *prev;
} dk_py_kernel_catch;
void dk_py_kernel_catch_begin(dk_py_kernel_catch *c);
int dk_py_kernel_catch_end(dk_py_kernel_catch *c, dk_py_state *s, dk_status st);
/* dk_pyhost_cache.c */
int dk_py_host_cache_init(PyObject *module);
/* dk_pytunables.c */
int dk_py_tunables_init(PyObject *module);
/* dk_pytorch_order.c */
int dk_py_torch_order_init(PyObject *module);
/* dk_pydevice.c: memory on a backend's device, unloading backends. */
int dk_py_device_init(PyObject *module);
void dk_py_torch_order_clear(dk_py_state *s);
/* dk_pyintrospect.c */
extern PyMethodDef dk_py_introspect_methods[];
int dk_py_introspect_init(PyObject *module, dk_py_state *s);
/* dk_pybackends_at_import.c: loads the GPU backend libraries found beside the extension and
 * those DKIT_BACKENDS names (Note [A failing backend never breaks the import]); -1 only with a
 * Python error of its own (out of memory). */
int dk_py_load_backends_at_import(dk_py_state *s);
/* Records how the library at `path` was loaded ("DKIT_BACKENDS", "load_backend", ...) for
 * dkit.backends(); an origin already recorded is kept unless `replace`. 0, or -1 with an error. */
int dk_py_note_backend_origin(dk_py_state *s, const char *path, const char *origin, int replace);
/* The backends installed packages declare (Note [Backends from entry points] in
 * dkit/_entry_points.py), loaded at the end of _C's initialisation; never fails the import. */
int dk_py_load_entry_point_backends(PyObject *module);

/* PyCFunction casts for METH_FASTCALL functions, without -Wcast-function-type complaining. */
#define DK_PY_FASTCALL(fn) ((PyCFunction)(void (*)(void))(fn))

#endif /* DK_PY_H */

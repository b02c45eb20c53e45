/*
 * dk_pyhost_cache.c — dkit._C's window on the host output cache (Note [Host output cache] in
 * csrc/cpu/dk_host_cache.h): host_empty, which the frameworks' allocation of large CPU outputs
 * goes through (dkit/_frameworks/torch.py), empty_cache and host_cache_stats.
 *
 * host_empty(shape, dtype) returns a legacy "dltensor" capsule (what torch 1.13 and NumPy 1.x
 * consume) over a cached block: a contiguous CPU tensor whose deleter gives the block back. The
 * deleter takes no Python lock: torch calls it wherever the tensor dies, autograd threads
 * included.
 */
#include "dk_py.h" /* first: Python.h must precede every system header (CPython's rule) */

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dk_check.h"
#include "dk_host_cache.h"

typedef struct {
    DLManagedTensor m;
    dk_host_block *blk;
    int64_t shape[]; /* ndim sizes */
} dk__host_managed;

static void dk__host_delete(DLManagedTensor *m)
{
    dk__host_managed *h = (dk__host_managed *)m;
    dk_host_cache_release(h->blk);
    free(h);
}

/* A capsule nobody consumed frees its tensor; a consumer renamed it "used_dltensor". */
static void dk__host_capsule_destructor(PyObject *cap)
{
    if (!PyCapsule_IsValid(cap, "dltensor")) return;
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
}

static dk_dtype dk__dtype_named(const char *name)
{
    for (int d = 0; d < (int)DK_DTYPE_UNSUPPORTED; ++d)
        if (strcmp(dk_dtype_name((dk_dtype)d), name) == 0) return (dk_dtype)d;
    return DK_DTYPE_UNSUPPORTED;
}

/* host_empty(shape: tuple[int, ...], dtype: str) -> capsule */
static PyObject *dk__host_empty(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    dk_py_state *s = dk_py_state_of_module(m);
    if (n != 2 || !PyTuple_Check(args[0]) || !PyUnicode_Check(args[1]))
        return dk_py_raise_fmt(s, DK_ETYPE, "host_empty(shape, dtype) takes a tuple of ints and a str");
    const char *name = PyUnicode_AsUTF8(args[1]);
    if (!name) return NULL;
    const dk_dtype dt = dk__dtype_named(name);
    if (dt == DK_DTYPE_UNSUPPORTED) return dk_py_raise_fmt(s, DK_ETYPE, "host_empty: unknown dtype '%s'", name);
    const Py_ssize_t nd = PyTuple_GET_SIZE(args[0]);
    if (nd > DK_MAX_NDIM)
        return dk_py_raise_fmt(s, DK_EINVAL, "host_empty: %zd dimensions, more than %d", nd, DK_MAX_NDIM);
    dk__host_managed *h = malloc(sizeof *h + (size_t)(nd ? nd : 1) * sizeof(int64_t));
    if (!h) return PyErr_NoMemory();
    uint64_t bytes = dk_dtype_size(dt);
    for (Py_ssize_t d = 0; d < nd; ++d) {
        const long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(args[0], d));
        if (v == -1 && PyErr_Occurred()) {
            free(h);
            return NULL;
        }
        if (v < 0) {
            free(h);
            return dk_py_raise_fmt(s, DK_EINVAL, "host_empty: size %lld of dimension %zd is negative", v, d);
        }
        h->shape[d] = v;
        if (__builtin_mul_overflow(bytes, (uint64_t)v, &bytes) || bytes > (uint64_t)PTRDIFF_MAX) {
            free(h);
            return dk_py_raise_fmt(s, DK_EINVAL, "host_empty: the tensor's size in bytes overflows");
        }
    }
    void *data;
    PyThreadState *ts = PyEval_SaveThread(); /* a new mapping may take a while */
    const dk_status st = dk_host_cache_alloc(bytes ? (size_t)bytes : 1, &data, &h->blk);
    PyEval_RestoreThread(ts);
    if (st != DK_OK) {
        free(h);
        return dk_py_raise_fmt(s, st, "%s", dk_last_error());
    }
    memset(&h->m, 0, sizeof h->m);
    h->m.dl_tensor.data = data;
    h->m.dl_tensor.device.device_type = kDLCPU;
    h->m.dl_tensor.ndim = (int32_t)nd;
    h->m.dl_tensor.dtype = dk_dtype_to_dl(dt);
    h->m.dl_tensor.shape = h->shape;
    h->m.dl_tensor.strides = NULL; /* row-major */
    h->m.deleter = dk__host_delete;
    PyObject *cap = PyCapsule_New(&h->m, "dltensor", dk__host_capsule_destructor);
    if (!cap) dk__host_delete(&h->m);
    return cap;
}

static PyObject *dk__empty_cache(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    PyThreadState *ts = PyEval_SaveThread();
    dk_host_cache_empty();
    PyEval_RestoreThread(ts);
    Py_RETURN_NONE;
}

static PyObject *dk__host_cache_stats(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    dk_host_cache_stats st;
    dk_host_cache_get_stats(&st);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:L}", "cached_bytes", (unsigned long long)st.cached_bytes,
                         "cached_blocks", (unsigned long long)st.cached_blocks, "live_bytes",
                         (unsigned long long)st.live_bytes, "live_blocks", (unsigned long long)st.live_blocks, "hits",
                         (unsigned long long)st.hits, "misses", (unsigned long long)st.misses, "min_bytes",
                         (long long)dk_host_cache_min_bytes());
}

static PyMethodDef dk__functions[] = {
    {"host_empty", DK_PY_FASTCALL(dk__host_empty), METH_FASTCALL,
     "host_empty(shape, dtype) -> capsule: an uninitialised contiguous CPU tensor from the host output cache "
     "(Note [Host output cache]), as a legacy DLPack capsule."},
    {"empty_cache", dk__empty_cache, METH_NOARGS, "empty_cache(): unmap every free block of the host output cache."},
    {"host_cache_stats", dk__host_cache_stats, METH_NOARGS,
     "host_cache_stats() -> dict: bytes and blocks cached and in use, hits, misses, and min_bytes (the size from "
     "which outputs come from the cache)."},
    {NULL, NULL, 0, NULL},
};

int dk_py_host_cache_init(PyObject *module) { return PyModule_AddFunctions(module, dk__functions); }

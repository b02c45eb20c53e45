/*
 * dk_pydlpack.h — importing Python objects as DLTensors, with DLPack's ownership rules.
 *
 * One op call imports each tensor argument with dk_py_dlpack_import, which records the managed
 * tensor it took in a dk_py_owners; after the op returns (or fails, or a later argument fails
 * to convert), dk_py_owners_release calls every deleter exactly once. Nothing is copied: the
 * DLTensor handed to the op points at the producer's memory, which the managed tensor keeps
 * alive until its deleter runs.
 */
#ifndef DK_PYDLPACK_H
#define DK_PYDLPACK_H

#include "dk_py.h"

/* A tensor dkit holds for one call: a consumed DLPack capsule, or (torch fast path) the tensor
 * object itself, read into a DLTensor that lives in the owners' `views`. */
typedef struct {
    PyObject *ref; /* strong: the capsule (already renamed used_*), or for a torch tensor read
                     * directly the tensor (reader) or its storage object (getters) */
    void *managed; /* DLManagedTensor(Versioned) *; NULL when the tensor was read directly */
    int versioned;
    void *keep;                 /* the reader's reference to the tensor's storage, or NULL */
    void (*unkeep)(void *keep); /* and how to give it back */
} dk_py_owner;

/* Shapes up to this rank are read into the view; larger ones take the DLPack capsule path. */
#define DK_PY_VIEW_NDIM 8
typedef struct {
    DLTensor t;
    int64_t dims[2 * DK_PY_VIEW_NDIM]; /* shape, then strides */
} dk_py_view;

/* At most one owner per argument, and an op has at most DK_STACK_MAX arguments. Lives on the
 * C stack of the call; only `n` and `nviews` need initialising. */
typedef struct {
    int n, nviews, nstreams;
    dk_py_owner o[DK_STACK_MAX];
    dk_py_view v[DK_STACK_MAX];
    /* current streams set for the call from a framework's own (Note [The consumer's stream]),
     * restored by dk_py_owners_release */
    struct {
        DLDevice device;
        void *previous;
    } streams[DK_STACK_MAX];
} dk_py_owners;

/*
 * Imports `obj` (an object with __dlpack__, or a "dltensor" / "dltensor_versioned" capsule) for
 * argument `arg` of op `op` (both only for messages). `writable` says the op writes the tensor:
 * a producer that flags it read-only is refused with DkitBufferError. On success *out points at
 * the DLTensor inside a managed tensor now owned by `owners`; returns 0. On failure returns -1
 * with an exception set, and `owners` is unchanged (nothing of `obj` is left to release).
 */
int dk_py_dlpack_import(dk_py_state *s, PyObject *obj, int writable, const char *op, const char *arg,
                        dk_py_owners *owners, DLTensor **out, int *ran_python);

/*
 * Note [Meta tensors in the core's calls]
 * A torch tensor on the meta device has a shape, strides and a dtype but no memory: it is how torch
 * asks "what would this op return?" (torch.device("meta"), torchvision's meta registrations). A
 * call of a core op whose tensors are all meta tensors therefore runs no kernel and returns, as
 * the kernel would have, with its outputs (meta tensors the op's Python side allocated) untouched:
 * the Python side has already given them their shapes and dtypes, which is all a meta tensor has.
 * dk_py_dlpack_import answers DK_PY_ABSTRACT for a meta tensor (nothing owned, *out not set),
 * and the call refuses a meta tensor beside tensors with memory, naming both, as torch does. The
 * core's checks of values (boxes, batch indices) need memory and do not run; those of shapes
 * run in Python where the outputs are sized. The question is asked only of torch tensors that
 * the CPU fast path declined, so it costs a CPU call nothing.
 */
#define DK_PY_ABSTRACT 1

/*
 * Note [Conversion order]
 * Converting a call's arguments may run the caller's Python code: an __index__ or __float__, a
 * producer's __dlpack__ (a torch subclass's __torch_function__ inside it). Such code may free
 * the memory of a tensor whose pointer was already read (storage().resize_(0), set_()), and the
 * kernel would then read freed memory, or write into memory another tensor now owns. Holding
 * the tensor or its storage does not prevent that. So _C converts in three passes:
 *   1. every non-tensor argument (the __index__, __float__ and sequence code runs here);
 *   2. tensors whose reading runs Python code (dk_py_dlpack_reads_late() == 0): protocol
 *      producers, and torch tensors through torch's getters when the reader is not built;
 *   3. tensors read with no Python code at all: DLPack capsules, and torch tensors through
 *      dkit._torch_reader.
 * Every pointer of pass 3 is read after the last Python code of the call has run. When a pointer
 * was read before some Python code ran (two producers in pass 2, or a reader refusal in pass 3
 * falling back to the protocol), every torch tensor is checked again afterwards
 * (dk_py_dlpack_recheck): one whose memory went away fails the call before any kernel runs.
 * What remains is another thread resizing a tensor while the kernel runs, which is torch's own
 * race for every op.
 */
/* 1 when obj is read in pass 3 (no Python code runs), 0 when reading it may run Python code. */
int dk_py_dlpack_reads_late(dk_py_state *s, PyObject *obj);
/* After every argument is converted: -1 with an exception set when obj, a torch tensor read
 * into t, no longer has that memory; 0 otherwise (also for anything that is not torch). */
int dk_py_dlpack_recheck(dk_py_state *s, PyObject *obj, const DLTensor *t, const char *op, const char *arg);

/*
 * One tensor taken from a producer (its __dlpack__, never torch's fast path) or a capsule, and
 * accepted by the core (dk_dlpack_accept: version, Note [Untrusted tensors]) for reading, for
 * argument `arg` of op `op`: on success the caller owns *managed (a DLManagedTensorVersioned
 * when *versioned, else a DLManagedTensor) and must call its deleter once; returns 0. On failure
 * -1 with a dkit exception set (Note [Producer errors] in dk_pydlpack.c), nothing taken.
 */
int dk_py_dlpack_take(dk_py_state *s, PyObject *obj, const char *op, const char *arg, void **managed, int *versioned);

/* Calls the deleter of a managed tensor (a DLManagedTensorVersioned when `versioned`), if any. */
void dk_py_managed_delete(void *managed, int versioned);
/* The destructor of a "dltensor" capsule dkit exports: calls the deleter unless a consumer took
 * the tensor (renamed the capsule "used_dltensor"). */
void dk_py_dltensor_capsule_destructor(PyObject *cap);

/* Calls each owned deleter once (newest first) and drops the references. Needs the GIL. */
void dk_py_owners_release(dk_py_owners *owners);

/* dk_pystream.c (Note [The consumer's stream]): the stream to ask `obj`'s producer for on
 * device (device_type, device_id): 1 with *stream set, 0 for a device without streams, -1 with
 * an exception set. A framework's current stream taken for the call is recorded in `owners`;
 * dk_py_restore_streams (also run by dk_py_owners_release) puts the previous ones back. */
int dk_py_consumer_stream(dk_py_state *s, PyObject *obj, int64_t device_type, int64_t device_id, dk_py_owners *owners,
                          const char *op, const char *arg, long *stream);
void dk_py_restore_streams(dk_py_owners *owners);
/* 1 when this call's kernels on `device` run on the current stream of `obj`'s framework (then
 * its __dlpack__(stream=...) would have nothing to do: Note [torch fast path on a GPU]), 0 when
 * they do not or the framework gave no way to find its stream, -1 with an exception set. */
int dk_py_on_framework_stream(dk_py_state *s, PyObject *obj, DLDevice device, dk_py_owners *owners, const char *op,
                              const char *arg);

/* Drops the producer cache's type references (module clear / free). */
/* The torch reader (Note [torch reader] in dk_pytorch.h): with on = 0 or 1, turns its use off or
 * on; with on = -1, only asks. Returns 1 when in use, 0 when loaded but off, -1 when there is
 * none (torch not imported, or dkit._torch_reader not built or not for this torch). */
int dk_py_torch_reader_use(dk_py_state *s, int on);
void dk_py_dlpack_clear(dk_py_state *s);
int dk_py_dlpack_traverse(dk_py_state *s, visitproc visit, void *arg);

#endif /* DK_PYDLPACK_H */

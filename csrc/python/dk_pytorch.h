/*
 * dk_pytorch.h — the C interface between dkit._C (C) and dkit._torch_reader (C++, optional).
 *
 * Note [torch reader]
 * A call from Python with torch tensors spends most of its binding time reading the tensors:
 * through torch's Python getters (is_cpu, dtype, shape, stride(), data_ptr()) that is about
 * 140 ns per tensor, because each getter goes through torch's argument parser and error
 * handling and builds Python objects (torch.Size, ints) only for _C to take apart again. The
 * tiny roi_align call reads three tensors: 0.4 us of a 2.5 us call. torch has no C interface for
 * this, so dkit._torch_reader, a small C++ module compiled against the installed torch headers,
 * reads the at::Tensor behind a torch.Tensor directly (about 10 ns) and hands _C one C function
 * through a capsule. It is built only where torch's headers are (setup.py), loaded by _C only
 * once the program has imported torch, and refuses to load when the running torch is not the
 * one it was compiled against (the C++ layout it reads is version specific). Without it, _C uses
 * the getters: the reader is purely a shortcut, never a different answer.
 */
#ifndef DK_PYTORCH_H
#define DK_PYTORCH_H

#include <Python.h>
#include <stdint.h>

#include "dk_dlpack.h"

#define DK_PY_TORCH_READER_CAPSULE "dkit._torch_reader.reader"
#define DK_PY_TORCH_READER_ABI 3
#define DK_PY_TORCH_NEG 2   /* read(): a tensor with torch's negative bit */
#define DK_PY_TORCH_SHORT 3 /* read(): elements past the end of the tensor's storage */
/* read(): torch.jit.trace is recording this thread (Note [Eager calls under torch.jit.trace]) */
#define DK_PY_TORCH_TRACING 4

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int abi; /* DK_PY_TORCH_READER_ABI */
    /* Reads `obj`, an exact torch.Tensor or a subclass _C has found to override nothing it
     * relies on, into t (shape and strides into the caller's arrays of max_ndim). Returns 0 when
     * t is filled: a strided CPU tensor of at most max_ndim dimensions with a dtype in the
     * table of dk_pydlpack.c, no negative or conjugate bit, and (if `writable`) not requiring
     * grad; *keep then holds a reference to the tensor's storage, which the caller gives back
     * with release(*keep) once it no longer uses t->data (with the GIL held: freeing a storage
     * may run Python code). Returns DK_PY_TORCH_NEG for a tensor with torch's negative bit (a
     * lazily negated view: its memory holds the values un-negated), which _C refuses, and
     * DK_PY_TORCH_SHORT for one whose sizes reach past the end of its storage, e.g. after
     * storage().resize_(), which _C refuses too; DK_PY_TORCH_TRACING while torch.jit.trace
     * records the calling thread outside a torch op, which _C refuses (Note [Eager calls under
     * torch.jit.trace] in dk_pytorch.cpp). Returns 1
     * for anything else: the caller then takes the general path, which gives the same answer
     * as without the reader. Never raises. */
    int (*read)(PyObject *obj, int writable, int max_ndim, DLTensor *t, int64_t *shape, int64_t *strides, void **keep);
    void (*release)(void *keep);
} dk_py_torch_reader;

#ifdef __cplusplus
}
#endif

#endif /* DK_PYTORCH_H */

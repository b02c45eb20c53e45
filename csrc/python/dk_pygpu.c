/*
 * dk_pygpu.c — loading the GPU backends that were built and shipped beside the extension.
 *
 * `make python` and setup.py put libdkit_cuda.so and libdkit_hip.so, when built, next to _C
 * (csrc/gpu/rules.mk). Importing _C loads each one present, before the op callables are made,
 * so every later call dispatches to it. Loading runs no CUDA or HIP call (Note [No GPU call at
 * load time] in csrc/gpu/dk_gpu_backend.cu): without a driver the import works and
 * dkit.backends() says why the backend is unavailable. A library that exists but cannot be
 * loaded (its runtime, libamdhip64, is not installed here) gives a RuntimeWarning naming it,
 * and dkit goes on without it. DKIT_GPU_BACKENDS=0 loads none.
 */
/* first: Python.h must precede every system header (CPython's rule); its pyconfig.h defines
 * _GNU_SOURCE, which dladdr needs (a definition of our own here would clash with CPython
 * builds whose pyconfig.h defines it to 1) */
#include "dk_py.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dk_py_load_gpu_backends(void)
{
    const char *env = getenv("DKIT_GPU_BACKENDS");
    if (env && !strcmp(env, "0")) return 0;
    Dl_info info;
    if (!dladdr((void *)dk_py_load_gpu_backends, &info) || !info.dli_fname) return 0;
    const char *slash = strrchr(info.dli_fname, '/');
    const int dir_len = slash ? (int)(slash - info.dli_fname) : 1;
    const char *dir = slash ? info.dli_fname : ".";
    static const char *const names[] = {"libdkit_cuda.so", "libdkit_hip.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[4096];
        if (snprintf(path, sizeof path, "%.*s/%s", dir_len, dir, names[i]) >= (int)sizeof path) continue;
        if (access(path, R_OK) != 0) continue; /* not built: nothing to say */
        dk_status st;
        Py_BEGIN_ALLOW_THREADS
        st = dk_load_backend(path);
        Py_END_ALLOW_THREADS
        if (st != DK_OK &&
            PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "dkit: GPU backend %s not loaded: %s", path, dk_last_error()) < 0)
            return -1; /* warnings turned into errors */
    }
    return 0;
}

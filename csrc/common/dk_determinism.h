/*
 * dk_determinism.h — a thread's request for deterministic kernels.
 *
 * Note [Deterministic kernels]
 * Some kernels have a fast form whose results vary from run to run in their last bits: a GPU
 * backward that scatters with atomic additions adds in whatever order the threads arrive. A
 * caller that needs the same bits on every run (debugging, reproducible training) asks for the
 * deterministic form, as torch.use_deterministic_algorithms(True) asks torch's kernels:
 *
 *   dk_set_deterministic(true) ... calls ... dk_set_deterministic(previous)
 *
 * The request is this thread's (the thread that makes the call, which is the one that launches a
 * GPU kernel), so that two threads with different needs do not disturb each other; a kernel with
 * such a choice reads dk_deterministic() when it is called. A process-wide default comes from a
 * kernel's own tunable (roi_align.gpu_deterministic, roi_pool.gpu_deterministic). dkit's torch
 * bridge sets the request from torch.are_deterministic_algorithms_enabled() around every backward
 * it runs
 * (dkit/_frameworks/torch.py). Kernels without a non-deterministic form ignore it: every CPU
 * kernel of dkit gives the same bits on every run and at any thread count.
 */
#ifndef DK_DETERMINISM_H
#define DK_DETERMINISM_H

#include <stdbool.h>

#include "dk_export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether this thread asked for deterministic kernels (false until it does). */
DK_API bool dk_deterministic(void);
/* Sets this thread's request; returns the previous one. */
DK_API bool dk_set_deterministic(bool on);

#ifdef __cplusplus
}
#endif

#endif /* DK_DETERMINISM_H */

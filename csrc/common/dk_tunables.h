/*
 * dk_tunables.h — named integer knobs of the kernels (CPU and GPU), read cheaply, settable at run
 * time. Part of the core: any backend's kernels may have them (roi_align.gpu_deterministic).
 *
 * Note [Tunables]
 * A kernel with two ways to do one thing (roi_align's sparse and dense evaluation orders, its
 * counted or bounded weight tables; large outputs' thresholds) picks one per call by a cost model
 * or a size bound. Each such choice is a tunable with a name, a default and a range: tests set it
 * to force every path on small inputs and compare each with the reference, so that no path is
 * only reached by inputs too large to test; benchmarks may explore it. One build serves all of
 * it. Reading a tunable is one relaxed atomic load. DKIT_TUNE="name=value,..." in the
 * environment sets them at load (Note [DKIT_TUNE] in dk_tunables.c); dkit._C.tunable(name[,
 * value]) reads and sets them from Python.
 *
 *     DK_TUNABLE(dk__ra_order, "roi_align.order", -1, -1, 1, "evaluation order: -1 cost model, 0 sparse, 1 dense");
 *     ... if (dk_tunable(&dk__ra_order) ...
 */
#ifndef DK_TUNABLES_H
#define DK_TUNABLES_H

#include <stddef.h> /* NULL, in DK_TUNABLE */
#include <stdint.h>

#include "dk_export.h"
#include "dk_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dk_tunable_def {
    const char *name;
    int64_t value;
    int64_t def, min, max;
    const char *doc;
    struct dk_tunable_def *next;
} dk_tunable_def;

/* Defines a tunable and registers it when the library loads. */
#define DK_TUNABLE(var, name, def, min, max, doc)                      \
    static dk_tunable_def var = {name, def, def, min, max, doc, NULL}; \
    DK__CONSTRUCTOR(var##_register) { dk__tunable_register(&var); }

static inline int64_t dk_tunable(const dk_tunable_def *t) { return __atomic_load_n(&t->value, __ATOMIC_RELAXED); }

/* Sets a tunable by name (its previous value into *previous, if not NULL); DK_ENOENT for an
 * unknown name, DK_EINVAL outside its range. */
DK_API dk_status dk_tunable_set(const char *name, int64_t value, int64_t *previous);
DK_API dk_status dk_tunable_get(const char *name, int64_t *value);
/* Every tunable back to its default. */
DK_API void dk_tunables_reset(void);
/* Reports on stderr each name in DKIT_TUNE that no tunable has (Note [DKIT_TUNE] in
 * dk_tunables.c); returns how many. */
DK_API int dk_tunables_check_env(void);

DK_API void dk__tunable_register(dk_tunable_def *t);

#ifdef __cplusplus
}
#endif
#endif /* DK_TUNABLES_H */

/* dk_init.h — the core's initialisation (Note [Core init] in dk_init.c). */
#ifndef DK_INIT_H
#define DK_INIT_H

#include "dk_export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Idempotent and thread-safe; runs by itself when libdkit loads. A program that links libdkit.a
 * and defines no op of its own calls it once before using the core. */
DK_API void dk_init(void);

#ifdef __cplusplus
}
#endif
#endif /* DK_INIT_H */

/*
 * dk_group.h — grouping items by a small integer key, stably: a counting sort.
 *
 * Kernels that work per image (roi_align's RoIs by batch index) or per class group their items
 * once per call: items of group g are order[beg[g] .. beg[g + 1]), in index order, and items whose
 * key is outside [0, ngroups) are listed apart, as orphans.
 */
#ifndef DK_GROUP_H
#define DK_GROUP_H

#include <stdint.h>

#include "dk_arena.h"
#include "dk_status.h"

typedef struct {
    int64_t *beg;     /* ngroups + 1 */
    int64_t *order;   /* n */
    int64_t *orphans; /* items whose key is not in [0, ngroups) */
    int64_t norphans;
} dk_groups;

/* Groups items 0 .. n - 1 by key[i], in the arena; DK_ENOMEM when it runs out. */
DK_API dk_status dk_groups_build(dk_groups *g, dk_arena *ar, const int64_t *key, int64_t n, int64_t ngroups);

#endif /* DK_GROUP_H */

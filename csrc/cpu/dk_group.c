/* dk_group.c — stable counting sort into groups (dk_group.h). */
#include "dk_group.h"

#include <string.h>

dk_status dk_groups_build(dk_groups *g, dk_arena *ar, const int64_t *key, int64_t n, int64_t ngroups)
{
    g->beg = (int64_t *)dk_arena_take_n(ar, (size_t)ngroups + 2, sizeof *g->beg);
    g->order = (int64_t *)dk_arena_take_n(ar, (size_t)n, sizeof *g->order);
    g->orphans = (int64_t *)dk_arena_take_n(ar, (size_t)n, sizeof *g->orphans);
    if (!g->beg || !g->order || !g->orphans)
        return dk_error(DK_ENOMEM, "out of memory grouping %lld items", (long long)n);
    memset(g->beg, 0, ((size_t)ngroups + 2) * sizeof *g->beg);
    g->norphans = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (key[i] >= 0 && key[i] < ngroups) g->beg[key[i] + 2]++;
        else g->orphans[g->norphans++] = i;
    }
    for (int64_t k = 0; k < ngroups; ++k) g->beg[k + 2] += g->beg[k + 1];
    /* beg[k + 1] is now the start of group k; filling advances it to the end of group k, which
     * leaves beg[k] = start of group k. */
    for (int64_t i = 0; i < n; ++i)
        if (key[i] >= 0 && key[i] < ngroups) g->order[g->beg[key[i] + 1]++] = i;
    return DK_OK;
}

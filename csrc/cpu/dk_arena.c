/* dk_arena.c — the scratch arena's heap blocks (Note [Scratch arena] in dk_arena.h). */
#include "dk_arena.h"

#include <stdlib.h>
#include <string.h>

void *dk_arena_take_slow(dk_arena *a, size_t n)
{
    size_t sz = a->block > SIZE_MAX / 4 ? SIZE_MAX : 4 * a->block;
    if (DK_ARENA_EXACT || sz - 64 < n) sz = n + 64;
    if (sz < n || sz > SIZE_MAX - 63) return NULL; /* overflow */
    sz = (sz + 63) & ~(size_t)63;                  /* C11: a multiple of the alignment */
    char *b = (char *)aligned_alloc(64, sz);
    if (!b) return NULL;
    memcpy(b, &a->heap, sizeof a->heap);
    a->heap = b;
    a->block = sz;
    a->p = b + 64 + n;
    a->end = b + sz;
    return b + 64;
}

void dk_arena_free(dk_arena *a)
{
    while (a->heap) {
        void *b = a->heap;
        memcpy(&a->heap, b, sizeof a->heap);
        free(b);
    }
}

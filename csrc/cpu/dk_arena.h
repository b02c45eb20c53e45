/*
 * dk_arena.h — a CPU kernel's scratch memory for one call: a bump allocator whose first block is
 * on the caller's stack.
 *
 * Note [Scratch arena]
 * Everything a call needs besides its tensors (geometry, groups, tables, per-thread buffers) is
 * carved from one arena and released at once when the call returns. Its first block is a buffer
 * on the caller's stack, so a small call makes no heap allocation at all (a dozen malloc/free
 * pairs were a third of the instructions of a tiny roi_align call); when a part does not fit, a
 * heap block of at least four times the previous one is chained, so a large call makes a few
 * allocations. Parts are 64-byte aligned: a cache line (threads' parts never share one) and
 * enough for any vector. Under AddressSanitizer every part is a heap block of its own instead,
 * so that its redzones still fence each part.
 *
 *     DK_ARENA_ON_STACK(ar);                    // declares `dk_arena ar` with its stack block
 *     float *t = dk_arena_take_n(&ar, n, sizeof *t);
 *     ...
 *     dk_arena_free(&ar);
 *
 * Sizes: dk_arena_take_n multiplies count by size with an overflow check, so a size computed
 * from shapes (which a hostile caller controls) can never wrap into a small allocation; an
 * impossible size is NULL, like an exhausted heap, and the kernel reports DK_ENOMEM.
 */
#ifndef DK_ARENA_H
#define DK_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "dk_export.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__SANITIZE_ADDRESS__)
#define DK_ARENA_EXACT 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DK_ARENA_EXACT 1
#endif
#endif
#ifndef DK_ARENA_EXACT
#define DK_ARENA_EXACT 0
#endif
/* The stack block; small enough for any thread's stack, large enough for a tiny call. */
#define DK_ARENA_STACK_BYTES (DK_ARENA_EXACT ? 64 : 16384)

typedef struct {
    char *p, *end; /* free room of the current block */
    size_t block;  /* size of the current block */
    void *heap;    /* newest heap block; each starts with a pointer to the one before */
} dk_arena;

#define DK_ARENA_ON_STACK(name)                           \
    _Alignas(64) char name##_stack[DK_ARENA_STACK_BYTES]; \
    dk_arena name = {name##_stack, name##_stack + sizeof name##_stack, sizeof name##_stack, NULL}

/* dk_arena_take when the current block is full: chains a new one. */
DK_API void *dk_arena_take_slow(dk_arena *a, size_t n);
/* Releases every heap block (the stack block goes with its frame). */
DK_API void dk_arena_free(dk_arena *a);

/* `bytes` bytes, 64-byte aligned; NULL when out of memory. Never NULL for 0 bytes. */
static inline void *dk_arena_take(dk_arena *a, size_t bytes)
{
    const size_t n = ((bytes ? bytes : 1) + 63) & ~(size_t)63;
    if (n < bytes) return NULL; /* overflow */
    if (n > (size_t)(a->end - a->p)) return dk_arena_take_slow(a, n);
    char *r = a->p;
    a->p += n;
    return r;
}

/* count * size bytes, or NULL when that product overflows or memory is out. */
static inline void *dk_arena_take_n(dk_arena *a, size_t count, size_t size)
{
    size_t bytes;
    if (__builtin_mul_overflow(count, size, &bytes)) return NULL;
    return dk_arena_take(a, bytes);
}

/* Saturating size arithmetic: a size computed from a caller's shapes that does not fit becomes
 * SIZE_MAX, which no allocation satisfies, instead of wrapping into a small one. */
static inline size_t dk_sat_mul(size_t a, size_t b)
{
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

static inline size_t dk_sat_add(size_t a, size_t b)
{
    size_t r;
    return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}

/* n rounded up to a multiple of 8 (elements), for parts carved from one allocation; saturating. */
static inline size_t dk_round8(size_t n) { return n > SIZE_MAX - 7 ? SIZE_MAX : (n + 7) & ~(size_t)7; }

#ifdef __cplusplus
}
#endif
#endif /* DK_ARENA_H */

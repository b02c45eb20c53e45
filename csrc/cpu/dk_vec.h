/*
 * dk_vec.h — the few vector operations CPU kernels use beyond plain C: 4-lane generic vectors of
 * float and double (GCC/Clang vector extensions: SSE on x86-64-v2, whatever the target has
 * elsewhere; no intrinsics), lane shuffles, unaligned loads and stores, and non-temporal stores
 * (Note [Streaming stores] in dk_large_output.h).
 *
 * Helpers pass vectors through pointers: four doubles are 32 bytes, whose by-value calling
 * convention differs with and without AVX (gcc's -Wpsabi).
 */
#ifndef DK_VEC_H
#define DK_VEC_H

#include <string.h>

typedef float dk_v4_f32 __attribute__((vector_size(16)));
typedef double dk_v4_f64 __attribute__((vector_size(32)));
/* Two 4-lane vectors as one: a single AVX register for float where the caller is compiled for AVX2
 * (target("avx2")), two SSE ones elsewhere. Passed by pointer, never by value (the ABI of a 32-byte
 * vector argument depends on the target). */
typedef float dk_v8_f32 __attribute__((vector_size(32)));
typedef double dk_v8_f64 __attribute__((vector_size(64)));

/* Lane shuffle of two 4-lane vectors (indices 4..7 pick from b). */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define DK_SHUF(a, b, i, j, k, l) __builtin_shufflevector(a, b, i, j, k, l)
#else
#define DK_SHUF(a, b, i, j, k, l)                         \
    __extension__({                                       \
        __typeof__(a) dk__x = (a), dk__y = (b), dk__r;    \
        dk__r[0] = (i) < 4 ? dk__x[(i)&3] : dk__y[(i)&3]; \
        dk__r[1] = (j) < 4 ? dk__x[(j)&3] : dk__y[(j)&3]; \
        dk__r[2] = (k) < 4 ? dk__x[(k)&3] : dk__y[(k)&3]; \
        dk__r[3] = (l) < 4 ? dk__x[(l)&3] : dk__y[(l)&3]; \
        dk__r;                                            \
    })
#endif

/* Unaligned loads and stores. */
static inline void dk_ld4_f32(dk_v4_f32 *v, const float *p) { memcpy(v, p, sizeof *v); }
static inline void dk_st4_f32(float *p, const dk_v4_f32 *v) { memcpy(p, v, sizeof *v); }
static inline void dk_ld4_f64(dk_v4_f64 *v, const double *p) { memcpy(v, p, sizeof *v); }
static inline void dk_st4_f64(double *p, const dk_v4_f64 *v) { memcpy(p, v, sizeof *v); }
static inline void dk_ld8_f32(dk_v8_f32 *v, const float *p) { memcpy(v, p, sizeof *v); }
static inline void dk_st8_f32(float *p, const dk_v8_f32 *v) { memcpy(p, v, sizeof *v); }
static inline void dk_ld8_f64(dk_v8_f64 *v, const double *p) { memcpy(v, p, sizeof *v); }
static inline void dk_st8_f64(double *p, const dk_v8_f64 *v) { memcpy(p, v, sizeof *v); }

/* *v to p (16-byte aligned) with non-temporal stores, which do not read the line first; plain
 * stores where there are none. */
static inline void dk_stream4_f32(float *p, const dk_v4_f32 *v)
{
#if defined(__SSE2__) && defined(__clang__) /* clang has no __builtin_ia32_movnt* */
    __builtin_nontemporal_store(*v, (dk_v4_f32 *)(void *)p);
#elif defined(__SSE2__)
    __builtin_ia32_movntps(p, *v);
#else
    dk_st4_f32(p, v);
#endif
}

static inline void dk_stream4_f64(double *p, const dk_v4_f64 *v)
{
#if defined(__SSE2__)
    typedef double dk__v2_f64 __attribute__((vector_size(16)));
    dk__v2_f64 x;
    memcpy(&x, v, sizeof x);
#if defined(__clang__)
    __builtin_nontemporal_store(x, (dk__v2_f64 *)(void *)p);
#else
    __builtin_ia32_movntpd(p, x);
#endif
    memcpy(&x, (const char *)v + sizeof x, sizeof x);
#if defined(__clang__)
    __builtin_nontemporal_store(x, (dk__v2_f64 *)(void *)(p + 2));
#else
    __builtin_ia32_movntpd(p + 2, x);
#endif
#else
    dk_st4_f64(p, v);
#endif
}

/* r[i][j] <-> r[j][i]: four 4-lane vectors as a 4 x 4 tile, transposed (a row of pixels of four
 * channels into four channels' rows, and back). */
static inline void dk_transpose4_f32(dk_v4_f32 r[4])
{
    const dk_v4_f32 t0 = DK_SHUF(r[0], r[1], 0, 4, 1, 5), t1 = DK_SHUF(r[2], r[3], 0, 4, 1, 5);
    const dk_v4_f32 t2 = DK_SHUF(r[0], r[1], 2, 6, 3, 7), t3 = DK_SHUF(r[2], r[3], 2, 6, 3, 7);
    r[0] = DK_SHUF(t0, t1, 0, 1, 4, 5), r[1] = DK_SHUF(t0, t1, 2, 3, 6, 7);
    r[2] = DK_SHUF(t2, t3, 0, 1, 4, 5), r[3] = DK_SHUF(t2, t3, 2, 3, 6, 7);
}
static inline void dk_transpose4_f64(dk_v4_f64 r[4])
{
    const dk_v4_f64 t0 = DK_SHUF(r[0], r[1], 0, 4, 1, 5), t1 = DK_SHUF(r[2], r[3], 0, 4, 1, 5);
    const dk_v4_f64 t2 = DK_SHUF(r[0], r[1], 2, 6, 3, 7), t3 = DK_SHUF(r[2], r[3], 2, 6, 3, 7);
    r[0] = DK_SHUF(t0, t1, 0, 1, 4, 5), r[1] = DK_SHUF(t0, t1, 2, 3, 6, 7);
    r[2] = DK_SHUF(t2, t3, 0, 1, 4, 5), r[3] = DK_SHUF(t2, t3, 2, 3, 6, 7);
}

/* After a thread's last non-temporal store: makes them visible to whoever joins it. */
static inline void dk_sfence(void)
{
#if defined(__SSE2__)
    __builtin_ia32_sfence();
#endif
}

#endif /* DK_VEC_H */

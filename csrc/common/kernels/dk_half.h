/*
 * kernels/dk_half.h — float16 and bfloat16 <-> float32 on raw uint16_t bit patterns.
 *
 * dkit stores 16-bit floats as uint16_t so that C, CUDA and HIP code share one representation
 * without depending on a compiler's half type. Kernels load 16-bit values, compute in float32
 * and round back on store.
 *
 * Formats (IEEE 754 binary16 and Google's bfloat16):
 *   float32   1 sign | 8 exponent (bias 127) | 23 fraction
 *   float16   1 sign | 5 exponent (bias 15)  | 10 fraction
 *   bfloat16  1 sign | 8 exponent (bias 127) | 7 fraction   (the top half of a float32)
 * Widening is exact. Narrowing rounds to nearest, ties to even, overflows to infinity, keeps
 * subnormals (float16 has them down to 2^-24) and turns NaN into a quiet NaN of the same sign.
 */
#ifndef DK_KERNELS_HALF_H
#define DK_KERNELS_HALF_H

#include <stdint.h>
#if !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
#include <string.h>
#endif

#include "dk_hd.h"

DK_HD DK_INLINE uint32_t dk_float_to_bits(float f)
{
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

DK_HD DK_INLINE float dk_bits_to_float(uint32_t u)
{
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* Both directions are branch-free on the common path: kernels convert whole planes, and data
 * that mixes zeros (the subnormal path) with normal values would defeat a branch predictor. */

DK_HD DK_INLINE float dk_half_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t em = (uint32_t)(h & 0x7fffu) << 13; /* exponent and fraction, float-aligned */
    /* Read as a float, em has the half's exponent in the float's exponent field, i.e. the value
     * divided by 2^(127 - 15); multiplying by 2^112 (0x77800000) restores it exactly, for
     * subnormal halves too (their float reading is a float subnormal, scaled to a normal). */
    const float scaled = dk_bits_to_float(em) * dk_bits_to_float(0x77800000u);
    /* An all-ones exponent (inf / NaN) keeps its fraction under float's all-ones exponent. */
    const uint32_t mag = (h & 0x7c00u) == 0x7c00u ? (em | 0x7f800000u) : dk_float_to_bits(scaled);
    return dk_bits_to_float(sign | mag);
}

DK_HD DK_INLINE uint16_t dk_float_to_half(float f)
{
    const uint32_t x = dk_float_to_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7fffffffu;
    /* >= 2^-14, a normal half: round to nearest even on the 13 dropped fraction bits (add just
     * under half an ulp, plus one when the kept part is odd; a carry correctly bumps the
     * exponent), then rebias 127 -> 15. */
    const uint32_t normal = ((ax + 0x0fffu + ((ax >> 13) & 1u)) >> 13) - (112u << 10);
    /* < 2^-14, a subnormal half (or zero): in |f| + 0.5 the last fraction bit is worth 2^-24,
     * the half subnormal unit, so the float addition itself rounds |f| to nearest even in that
     * unit and leaves the count in the low bits (up to 0x400, the smallest normal: still the
     * right encoding). */
    const uint32_t sub = dk_float_to_bits(dk_bits_to_float(ax) + 0.5f) - 0x3f000000u;
    uint32_t h = ax >= 0x38800000u ? normal : sub;
    /* 65520 = 0x477ff000 is halfway between 65504 (largest half, odd fraction) and 2^16: a tie
     * that rounds to even, i.e. to infinity; everything from there up, incl. inf, is inf. */
    h = ax >= 0x477ff000u ? 0x7c00u : h;
    /* NaN: quiet, keeping the top payload bits. */
    h = ax > 0x7f800000u ? (0x7e00u | ((ax >> 13) & 0x3ffu)) : h;
    return (uint16_t)(sign | h);
}

DK_HD DK_INLINE float dk_bfloat16_to_float(uint16_t b) { return dk_bits_to_float((uint32_t)b << 16); }

DK_HD DK_INLINE uint16_t dk_float_to_bfloat16(float f)
{
    const uint32_t x = dk_float_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: truncating could clear the payload -> inf */
        return (uint16_t)((x >> 16) | 0x0040u);
    /* Round to nearest even on the 16 dropped bits; a carry may overflow into inf, as it should. */
    const uint32_t bias = 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)((x + bias) >> 16);
}

#endif /* DK_KERNELS_HALF_H */

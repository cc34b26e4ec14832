/* Rows of the paged pool stored in 8 bits (engine/worker/kv_quant.py) read back as floats: int8, or float8
   e4m3fn, each row D bytes and its float32 scale. LANES bytes at a time (vectors.h), with the ISA's widening
   instructions where there are some. */
#ifndef KVTUI_KV_ROWS_H
#define KVTUI_KV_ROWS_H
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "vectors.h"

/* how a row is stored: float32, or D bytes + a float32 scale */
enum { FLOAT32 = 0, INT8 = 1, FP8_E4M3 = 2 };

/* float8 e4m3fn (bias 7, no infinities) as a float x 2^-8, exactly: a normal number's 7 bits of exponent and
   mantissa moved to float32's places with the bias raised by 112; a subnormal (exponent 0) is mantissa x 2^-17.
   The 2^-8 is the half float's (below), folded into the row's scale. No NaN is ever stored (the writer clamps
   to +-448) */
static inline float e4m3(uint8_t b) {
    const int magnitude = b & 0x7F;
    float x;
    if (b & 0x78) {
        const uint32_t bits = ((uint32_t)magnitude << 20) + (112u << 23);
        memcpy(&x, &bits, sizeof x);
    } else {
        x = (float)(b & 7) * (1.0f / 131072.0f);
    }
    return b & 0x80 ? -x : x;
}

/* LANES bytes to int32 lanes, sign-extended or not: one instruction; GCC's own conversion of a byte vector
   turns into scalar code */
static inline vi widen(const uint8_t *p, int is_signed) {
#if defined(__AVX512F__)
    const __m128i c = _mm_loadu_si128((const __m128i *)p);
    return (vi)(is_signed ? _mm512_cvtepi8_epi32(c) : _mm512_cvtepu8_epi32(c));
#elif defined(__AVX2__) && LANES == 8
    const __m128i c = _mm_loadl_epi64((const __m128i *)p);
    return (vi)(is_signed ? _mm256_cvtepi8_epi32(c) : _mm256_cvtepu8_epi32(c));
#else
    vi out;
    for (int i = 0; i < LANES; i++) out[i] = is_signed ? (int8_t)p[i] : p[i];
    return out;
#endif
}

/* LANES e4m3fn bytes as floats x 2^-8. With F16C: each byte's sign, exponent and mantissa moved into a half
   float's places, which is the value x 2^-8 exactly (subnormals included: bias 7 against 15, 3 mantissa bits
   against 10); (b + (b & 0x80)) << 7 carries the sign from bit 14 to 15. The hardware turns halves into
   floats. Without: the bits by hand */
static inline vf e4m3_vector(const uint8_t *p) {
#if defined(__F16C__) && defined(__AVX512F__)
    const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
    const __m256i half = _mm256_slli_epi16(_mm256_add_epi16(w, _mm256_and_si256(w, _mm256_set1_epi16(0x80))), 7);
    return (vf)_mm512_cvtph_ps(half);
#elif defined(__F16C__) && defined(__AVX2__) && LANES == 8
    const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)p));
    const __m128i half = _mm_slli_epi16(_mm_add_epi16(w, _mm_and_si128(w, _mm_set1_epi16(0x80))), 7);
    return (vf)_mm256_cvtph_ps(half);
#else
    const vi b = widen(p, 0);
    const vi normal = ((b & 0x7F) << 20) + (112 << 23);
    const vf small = __builtin_convertvector(b & 7, vf) * (1.0f / 131072.0f);
    /* -1 where the exponent is not 0 */
    const vi is_normal = (b & 0x78) != 0;
    return (vf)((normal & is_normal) | ((vi)small & ~is_normal) | ((b & 0x80) << 24));
#endif
}

/* a stored row of D values as floats, without its scale, which it returns (for e4m3 the floats are x 2^-8 and
   the scale x 2^8) */
static inline __attribute__((always_inline)) float row_floats(const uint8_t *restrict row, int kind, int D,
                                                              float *restrict out) {
    const int whole = D / LANES * LANES;
    for (int i = 0; i < whole; i += LANES) {
        const vf x = kind == INT8 ? __builtin_convertvector(widen(row + i, 1), vf) : e4m3_vector(row + i);
        store(out + i, x);
    }
    for (int i = whole; i < D; i++) out[i] = kind == INT8 ? (float)(int8_t)row[i] : e4m3(row[i]);
    float scale;
    memcpy(&scale, row + D, sizeof scale);
    /* e4m3's floats are x 2^-8: the scale takes the 2^8 (both exact) */
    return kind == INT8 ? scale : scale * 256.0f;
}

#endif

/* K/V rows quantized into the paged pool or a ring on the CPU, giving torch's own bits
   (engine/worker/kv_quant.py).

   A decode step writes one row per KV head and layer; torch's dozen small operators per write cost more than the
   rest of the attention at short contexts. This is the same arithmetic in one call: per row, scale =
   max |x| / largest (1 for an all-zero row), then x / scale clamped to +-largest, rounded half to even (int8) or
   to the nearest float8 e4m3fn (torch's own conversion, c10's fp8e4m3fn_from_fp32_value), then the scale's 4
   bytes. Built without fused multiply-adds (build.py's flags for this file): every operation rounds as torch's.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t bits_of(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static inline float float_of(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* float to float8 e4m3fn, round to nearest even; NaN (0x7F) from 464 up */
static inline uint8_t to_e4m3(float f) {
    const uint32_t nan_from = UINT32_C(1087) << 20, denormal_magic = UINT32_C(141) << 23;
    uint32_t b = bits_of(f);
    const uint32_t sign = b & UINT32_C(0x80000000);
    b ^= sign;
    uint8_t out;
    if (b >= nan_from) {
        out = 0x7F;
    } else if (b < (UINT32_C(121) << 23)) {
        /* below e4m3's smallest normal: the float addition rounds to the subnormal step */
        out = (uint8_t)(bits_of(float_of(b) + float_of(denormal_magic)) - denormal_magic);
    } else {
        const uint32_t odd = (b >> 20) & 1;
        b += ((uint32_t)(7 - 127) << 23) + UINT32_C(0x7FFFF) + odd;
        out = (uint8_t)(b >> 20);
    }
    return out | (uint8_t)(sign >> 24);
}

/* x: N x H rows of D floats, row (n, h) at x + n * stride_n + h * stride_h; it goes to the pool's row
   slot_of[n] x slot_stride + h x head_stride (rows of D + 4 bytes: the paged pool's [H, slots, D + 4] or a ring's
   [row x slot, H, D + 4]). kind 1 int8 (largest 127), 2 e4m3fn (largest 448). Returns 0, or without writing: 1
   where a slot lies outside [0, slots), 2 for an unknown kind. */
int quantize_write(const float *x, int64_t N, int64_t H, int64_t D, int64_t stride_n, int64_t stride_h,
                   const int64_t *slot_of, uint8_t *pool, int64_t slots, int64_t slot_stride, int64_t head_stride,
                   int kind) {
    if (kind != 1 && kind != 2) return 2;
    for (int64_t n = 0; n < N; n++)
        if (slot_of[n] < 0 || slot_of[n] >= slots) return 1;
    const float largest = kind == 1 ? 127.0f : 448.0f;
    const int64_t row_bytes = D + (int64_t)sizeof(float);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t h = 0; h < H; h++) {
            const float *row = x + n * stride_n + h * stride_h;
            uint8_t *out = pool + (slot_of[n] * slot_stride + h * head_stride) * row_bytes;
            float top = 0.0f;
            for (int64_t d = 0; d < D; d++) top = fmaxf(top, fabsf(row[d]));
            float scale = top / largest;
            if (!(scale > 0.0f)) scale = 1.0f;
            for (int64_t d = 0; d < D; d++) {
                float y = row[d] / scale;
                y = y < -largest ? -largest : (y > largest ? largest : y);
                out[d] = kind == 1 ? (uint8_t)(int8_t)nearbyintf(y) : to_e4m3(y);
            }
            memcpy(out + D, &scale, sizeof scale);
        }
    }
    return 0;
}

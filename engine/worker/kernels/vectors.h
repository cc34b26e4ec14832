/* The vector the kernels compute in, sized to the ISA the build targets (build.py: -march=native, or
   KVTUI_MARCH): one register of it, so that a tile sized by VECTOR_REGISTERS stays in the registers. A vector
   wider than the registers (64 bytes on AVX2) made gcc move every lane through the stack: 5-50x slower. */
#ifndef KVTUI_VECTORS_H
#define KVTUI_VECTORS_H
#include <stdint.h>

#if defined(__AVX512F__)
#define VECTOR_BYTES 64
#define VECTOR_REGISTERS 32
#elif defined(__AVX__)
#define VECTOR_BYTES 32
#define VECTOR_REGISTERS 16
#elif defined(__aarch64__)
/* NEON */
#define VECTOR_BYTES 16
#define VECTOR_REGISTERS 32
#else
/* SSE2 and anything else */
#define VECTOR_BYTES 16
#define VECTOR_REGISTERS 16
#endif
#define LANES (VECTOR_BYTES / 4)

typedef float vf __attribute__((vector_size(VECTOR_BYTES)));
typedef int32_t vi __attribute__((vector_size(VECTOR_BYTES)));
/* the same vector at any float's address: memory is read and written through it, a plain unaligned access
   (a memcpy through a temporary kept AVX2 values on the stack) */
typedef float vf_unaligned __attribute__((vector_size(VECTOR_BYTES), aligned(4), may_alias));

static inline vf load(const float *p) { return *(const vf_unaligned *)p; }

static inline void store(float *p, vf x) { *(vf_unaligned *)p = x; }

/* the sum of the lanes as a tree of halves: log2(LANES) dependent adds, not LANES */
static inline float hsum(vf x) {
    typedef float v4 __attribute__((vector_size(16)));
#if LANES >= 8
    typedef float v8 __attribute__((vector_size(32)));
#endif
#if LANES == 16
    const v8 a = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7) +
                 __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
#elif LANES == 8
    const v8 a = x;
#endif
#if LANES >= 8
    const v4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
#else
    const v4 b = x;
#endif
    return (b[0] + b[2]) + (b[1] + b[3]);
}

/* each lane of x, or `floor` where it is below */
static inline vf at_least(vf x, float floor) {
    const vf bound = (vf){0} + floor;
    const vi below = x < bound;
    return (vf)(((vi)x & ~below) | ((vi)bound & below));
}

#endif

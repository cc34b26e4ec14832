/* y = x W^T + b for a few rows of x (a decode step: one row per sequence), float32, on the CPU.

   A decode step reads every weight once whatever the batch, so this product is bound by memory if the kernel
   streams the weights at the memory's speed and does all of the rows' work on each weight while it is in a
   register. W is repacked once (small_linear.py) into panels of 16 outputs:
   panel[p][k][0..15] = W[16p .. 16p + 15][k], so a panel is one sequential stream, and each 16-wide load of it
   is multiplied into every row's 16 outputs by a broadcast of x[m][k]: no horizontal sums, M independent
   accumulators. Several panels at a time when there are few rows, so enough multiply-adds are in flight.
   Built by build.py with the machine's vector width (-march=native).
*/
#include <stdint.h>
#include <string.h>

typedef float vf __attribute__((vector_size(64), aligned(4)));
#define LANES 16
#define MAX_ROWS 16
#define BLOCK_K 32

static inline vf load(const float *p) {
    vf x;
    memcpy(&x, p, sizeof x);
    return x;
}

/* outputs [16 p, 16 (p + P)) of rows 0..M-1, P panels at once (M and P constants after inlining) */
static inline __attribute__((always_inline)) void panels(const float *restrict x, int M, int64_t K,
                                                         const float *restrict w, int P, float *restrict acc) {
    vf a[MAX_ROWS * 4], part[MAX_ROWS * 4];
    for (int i = 0; i < M * P; i++) a[i] = (vf){0};
    /* blocked sums: each block of BLOCK_K products is summed on its own, then added to the total, so rounding
       grows with K / BLOCK_K + BLOCK_K, not with K (the logits stay within 1e-4 of MKL's on a real model) */
    for (int64_t k0 = 0; k0 < K; k0 += BLOCK_K) {
        const int64_t k1 = k0 + BLOCK_K < K ? k0 + BLOCK_K : K;
        for (int i = 0; i < M * P; i++) part[i] = (vf){0};
        for (int64_t k = k0; k < k1; k++) {
            for (int p = 0; p < P; p++) {
                const vf wk = load(w + ((int64_t)p * K + k) * LANES);
                for (int m = 0; m < M; m++) part[m * P + p] += x[m * K + k] * wk;
            }
        }
        for (int i = 0; i < M * P; i++) a[i] += part[i];
    }
    for (int i = 0; i < M * P; i++) memcpy(acc + (int64_t)i * LANES, &a[i], sizeof a[i]);
}

static void panels_any(const float *x, int M, int64_t K, const float *w, int P, float *acc) {
#define CASE(m)                                                                                                \
    case m:                                                                                                    \
        if (P == 4)                                                                                            \
            panels(x, m, K, w, 4, acc);                                                                        \
        else if (P == 3)                                                                                       \
            panels(x, m, K, w, 3, acc);                                                                        \
        else if (P == 2)                                                                                       \
            panels(x, m, K, w, 2, acc);                                                                        \
        else                                                                                                   \
            panels(x, m, K, w, 1, acc);                                                                        \
        break;
    switch (M) {
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8)
        CASE(9) CASE(10) CASE(11) CASE(12) CASE(13) CASE(14) CASE(15) CASE(16)
    }
#undef CASE
}

/* x [M, K] rows; packed [ceil(N / 16), K, 16]; bias [N] or NULL; y [M, N]. M <= 16. Returns 0, or 1 for an M
   out of range (nothing written). */
int small_linear(const float *x, int M, int64_t K, const float *packed, int64_t N, const float *bias, float *y,
                 int threads) {
    if (M < 1 || M > MAX_ROWS) return 1;
    const int64_t count = (N + LANES - 1) / LANES;
    /* few rows leave the multiply-adds of one panel waiting on each other: more panels per pass (measured on
       SmolLM2's shapes: 4 for up to 4 rows, 3 for up to 8; past 8 rows oneDNN is faster, small_linear.py) */
    const int P = M <= 4 ? 4 : (M <= 8 ? 3 : 1);
    const int64_t passes = (count + P - 1) / P;
#pragma omp parallel for schedule(static) num_threads(threads) if (passes > 4)
    for (int64_t pass = 0; pass < passes; pass++) {
        const int64_t first = pass * P;
        const int here = first + P <= count ? P : (int)(count - first);
        float acc[MAX_ROWS * 4 * LANES];
        panels_any(x, M, K, packed + first * K * LANES, here, acc);
        for (int m = 0; m < M; m++)
            for (int p = 0; p < here; p++) {
                const int64_t n0 = (first + p) * LANES;
                const int64_t width = N - n0 < LANES ? N - n0 : LANES;
                const float *a = acc + ((int64_t)m * here + p) * LANES;
                float *out = y + m * N + n0;
                for (int64_t i = 0; i < width; i++) out[i] = a[i] + (bias != NULL ? bias[n0 + i] : 0.0f);
            }
    }
    return 0;
}

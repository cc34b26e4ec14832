/* The small operations of a Llama-family decoder layer on the CPU, float32, giving torch's own bits.

   A decode step of a few rows spends as much time in torch's small operators (an RMSNorm is seven of them,
   the rotary embedding ten) and in the modules' Python as in its matrix products. These two calls do the same
   arithmetic, operation for operation, in one pass each:
   - add_rms_norm: h += delta (the residual), then out = weight * (h * (1 / sqrt(mean(h^2) + eps))), the mean
     summed in the order torch's CPU sum kernel uses (its AVX2 cascade of 8 lanes; engine/worker/fused_forward.py
     checks on this machine that the result equals the model's own RMSNorm bit for bit before using it);
   - rope_write: the rotary embedding of a decode step's query and key heads, (x * cos) + (rotate_half(x) * sin)
     as transformers computes it, then the key and value written into their slots of the paged pool; rope: the
     same rotation of a prefill's rows, written out for the attention.
   Built without fused multiply-adds (build.py's flags for this file): each product is rounded, as torch's are.
*/
#include <math.h>
#include <stdint.h>

/* lanes of torch's float Vectorized in its sum kernel (registered for AVX2, not AVX-512, and 8 elsewhere) */
#define SUM_LANES 8
/* vectors summed side by side in torch's row_sum (its ilp_factor) */
#define ILP 4
/* cascade levels of torch's multi_row_sum */
#define LEVELS 4

static int64_t ceil_log2(int64_t x) {
    if (x <= 2) return 1;
    int64_t bits = 0;
    for (uint64_t y = (uint64_t)(x - 1); y; y >>= 1) bits++;
    return bits;
}

/* sum of x[i]^2 (each square rounded), in the order of torch's vectorized_inner_sum over a contiguous row:
   vectors of 8 lanes, 4 of them side by side, those in a cascade of levels of 16 or more, then the lanes */
static float torch_sum_of_squares(const float *x, int64_t n) {
    float acc[LEVELS][ILP][SUM_LANES] = {{{0}}};
    int64_t vectors = n / SUM_LANES, size = vectors / ILP;
    int64_t power = ceil_log2(size) / LEVELS;
    if (power < 4) power = 4;
    int64_t step = (int64_t)1 << power, mask = step - 1;
    int64_t i = 0;
    while (i + step <= size) {
        for (int64_t j = 0; j < step; ++j, ++i)
            for (int k = 0; k < ILP; k++)
                for (int l = 0; l < SUM_LANES; l++) {
                    float v = x[(i * ILP + k) * SUM_LANES + l];
                    acc[0][k][l] += v * v;
                }
        for (int j = 1; j < LEVELS; j++) {
            for (int k = 0; k < ILP; k++)
                for (int l = 0; l < SUM_LANES; l++) {
                    acc[j][k][l] += acc[j - 1][k][l];
                    acc[j - 1][k][l] = 0.0f;
                }
            if (i & (mask << (j * power))) break;
        }
    }
    for (; i < size; ++i)
        for (int k = 0; k < ILP; k++)
            for (int l = 0; l < SUM_LANES; l++) {
                float v = x[(i * ILP + k) * SUM_LANES + l];
                acc[0][k][l] += v * v;
            }
    for (int j = 1; j < LEVELS; j++)
        for (int k = 0; k < ILP; k++)
            for (int l = 0; l < SUM_LANES; l++) acc[0][k][l] += acc[j][k][l];
    /* row_sum: the vectors left over go to the first partial sum, then the partial sums are added in turn */
    for (int64_t v = size * ILP; v < vectors; v++)
        for (int l = 0; l < SUM_LANES; l++) {
            float e = x[v * SUM_LANES + l];
            acc[0][0][l] += e * e;
        }
    for (int k = 1; k < ILP; k++)
        for (int l = 0; l < SUM_LANES; l++) acc[0][0][l] += acc[0][k][l];
    /* vectorized_inner_sum: the scalar tail first, then the lanes in turn */
    float total = 0.0f;
    for (int64_t t = vectors * SUM_LANES; t < n; t++) total += x[t] * x[t];
    for (int l = 0; l < SUM_LANES; l++) total += acc[0][0][l];
    return total;
}

/* h [M, H] (+= delta [M, H] first, when given) -> out [M, H] = weight * (h * rsqrt(mean(h^2) + eps)), the rows
   shared among `threads` when there are many (a prefill). 1: H is below torch's vector width (torch sums such
   rows another way). */
int add_rms_norm(float *h, const float *delta, int64_t M, int64_t H, const float *weight, float eps, float *out,
                 int threads) {
    if (H < SUM_LANES) return 1;
#pragma omp parallel for schedule(static) num_threads(threads) if (M >= 64)
    for (int64_t m = 0; m < M; m++) {
        float *row = h + m * H, *y = out + m * H;
        if (delta)
            for (int64_t i = 0; i < H; i++) row[i] = row[i] + delta[m * H + i];
        /* torch's mean: the sum divided by the count; rsqrt: 1 / sqrt, each rounded */
        float variance = torch_sum_of_squares(row, H) / (float)H;
        float scale = 1.0f / sqrtf(variance + eps);
        for (int64_t i = 0; i < H; i++) y[i] = weight[i] * (row[i] * scale);
    }
    return 0;
}

/* (x * cos) + (rotate_half(x) * sin) of one head; rotate_half(x) = cat(-x[D/2:], x[:D/2]) */
static void rotate(const float *x, const float *cos, const float *sin, int64_t D, float *y) {
    int64_t half = D / 2;
    for (int64_t i = 0; i < half; i++) y[i] = x[i] * cos[i] + (-x[i + half]) * sin[i];
    for (int64_t i = half; i < D; i++) y[i] = x[i] * cos[i] + x[i - half] * sin[i];
}

/* q [N, Hq, D], k / v [N, Hkv, D] (a decode row each), cos / sin [N, D]: q_out [N, Hq, D] the rotated queries;
   the rotated keys and the values written to slot slots_of[n] of keys / values [Hkv, slots, D].
   1: a slot outside the pool; 2: an odd head dimension. */
int rope_write(const float *q, const float *k, const float *v, int64_t N, int64_t Hq, int64_t Hkv, int64_t D,
               const float *cos, const float *sin, float *keys, float *values, int64_t slots,
               const int64_t *slots_of, float *q_out) {
    if (D % 2) return 2;
    for (int64_t n = 0; n < N; n++)
        if (slots_of[n] < 0 || slots_of[n] >= slots) return 1;
    for (int64_t n = 0; n < N; n++) {
        const float *c = cos + n * D, *s = sin + n * D;
        for (int64_t h = 0; h < Hq; h++) rotate(q + (n * Hq + h) * D, c, s, D, q_out + (n * Hq + h) * D);
        for (int64_t h = 0; h < Hkv; h++) {
            float *key = keys + (h * slots + slots_of[n]) * D, *value = values + (h * slots + slots_of[n]) * D;
            rotate(k + (n * Hkv + h) * D, c, s, D, key);
            for (int64_t i = 0; i < D; i++) value[i] = v[(n * Hkv + h) * D + i];
        }
    }
    return 0;
}

/* q [T, Hq, D], k [T, Hkv, D], cos / sin [T, D] -> q_out, k_out rotated (the rows of a prefill: the attention
   reads them as they are and writes the pool itself). 2: an odd head dimension. */
int rope(const float *q, const float *k, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const float *cos,
         const float *sin, float *q_out, float *k_out, int threads) {
    if (D % 2) return 2;
#pragma omp parallel for schedule(static) num_threads(threads) if (T >= 64)
    for (int64_t t = 0; t < T; t++) {
        const float *c = cos + t * D, *s = sin + t * D;
        for (int64_t h = 0; h < Hq; h++) rotate(q + (t * Hq + h) * D, c, s, D, q_out + (t * Hq + h) * D);
        for (int64_t h = 0; h < Hkv; h++) rotate(k + (t * Hkv + h) * D, c, s, D, k_out + (t * Hkv + h) * D);
    }
    return 0;
}

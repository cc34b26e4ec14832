/* Decode attention over the paged K/V pool on the CPU: one query token per sequence, float32.

   For every sequence n and KV head h, the G query heads of that KV head read the sequence's keys and values
   in place, block by block through its block table: no gather, no padding, one call per layer for the whole
   decode group. Each (n, h) is cut into `splits` ranges of blocks so that even one sequence keeps every core
   busy; a range keeps a running max, sum and weighted sum of values (the online softmax of flash attention),
   and the ranges merge at the end by their log-sum-exps.

   Layout (engine/worker/paged_kv.py): keys and values are [Hkv, slots, D], slot = block x block_size + offset.
   Quantized K/V (paged_decode_8bit, engine/worker/kv_quant.py): a row is D bytes of int8 or float8 e4m3fn and
   its float32 scale; each row is turned into floats once (for all G query heads), its scale folded into the
   scores' scale (K) and the softmax weights (V), so the loops below run on floats as for float32 K/V.
   Built by engine/worker/kernels/build.py for the target's vector width (vectors.h).
*/
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv_rows.h"
#include "vectors.h"

/* tokens scored at once: their scores stay in registers / L1 */
#define TILE 32
/* rows prefetched ahead of the one scored */
#ifndef AHEAD
#define AHEAD 16
#endif

/* exp(x) for x <= 0: 2^n x exp(r), n = round(x / ln 2), |r| <= ln 2 / 2, exp(r) by a degree-6 polynomial
   (relative error about 2e-7, as Cephes' expf) */
static inline vf vexp(vf x) {
    /* below -87, 2^n leaves the normal floats (the weight is 0 to float precision anyway) */
    x = at_least(x, -87.0f);
    /* 1.5 x 2^23: adding it rounds to an integer */
    vf t = x * 1.44269504088896341f + 12582912.0f;
    vf n = t - 12582912.0f;
    vf r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    vf p = 1.9875691500e-4f * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * (vf)((__builtin_convertvector(n, vi) + 127) << 23);
}

/* the G scores of one key row: the row read once for all G query heads */
static inline __attribute__((always_inline)) void scores_of_row(const float *restrict q, const float *restrict k,
                                                                int G, int D, float scale, float softcap,
                                                                float *restrict out, int stride) {
    const int whole = D / LANES * LANES;
    for (int g = 0; g < G; g++) {
        const float *qg = q + (int64_t)g * D;
        float s = 0.0f;
        if (whole) {
            vf acc = load(qg) * load(k);
            for (int i = LANES; i < whole; i += LANES) acc += load(qg + i) * load(k + i);
            s = hsum(acc);
        }
        for (int i = whole; i < D; i++) s += qg[i] * k[i];
        s *= scale;
        out[g * stride] = softcap > 0.0f ? softcap * tanhf(s / softcap) : s;
    }
}

/* one (sequence, KV head, range of positions [t0, t1)): m[g], l[g], acc[g][D] of its G query heads; k and v
   rows of `kind` (row_bytes apart) */
static inline __attribute__((always_inline)) void attend_range(const float *restrict q, const uint8_t *restrict k,
                                                               const uint8_t *restrict v, int kind,
                                                               const int64_t *restrict table, int64_t t0,
                                                               int64_t t1, int block_size, int G, int D,
                                                               float scale, float softcap, float *restrict m,
                                                               float *restrict l, float *restrict acc) {
    const int64_t row_bytes = kind == FLOAT32 ? (int64_t)D * sizeof(float) : D + (int64_t)sizeof(float);
    float scores[G * TILE];
    /* quantized rows as floats: one key row at a time, the tile's value rows, and the value rows' scales */
    float key_row[kind == FLOAT32 ? 1 : D], value_tile[kind == FLOAT32 ? 1 : TILE * D], value_scale[TILE];
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        memset(acc + (int64_t)g * D, 0, sizeof(float) * D);
    }
    int64_t ahead = t0 + AHEAD, ahead_block = ahead / block_size, ahead_offset = ahead % block_size;
    for (int64_t t = t0; t < t1;) {
        /* a tile of positions inside one block: consecutive slots */
        const int64_t block = t / block_size, offset = t % block_size;
        int64_t n = block_size - offset;
        if (n > t1 - t) n = t1 - t;
        if (n > TILE) n = TILE;
        const int64_t slot = table[block] * block_size + offset;
        const uint8_t *kt = k + slot * row_bytes, *vt = v + slot * row_bytes;
        for (int64_t j = 0; j < n; j++) {
            /* the key and value rows AHEAD positions on, one of each per row scored: blocks are scattered, and
               the hardware prefetcher stops at page edges and runs too short a distance ahead of this loop */
            if (ahead < t1) {
                const uint8_t *kp = k + (table[ahead_block] * block_size + ahead_offset) * row_bytes;
                const uint8_t *vp = v + (kp - k);
                for (int64_t i = 0; i < row_bytes; i += 64) {
                    __builtin_prefetch(kp + i);
                    __builtin_prefetch(vp + i);
                }
                ahead++;
                if (++ahead_offset == block_size) {
                    ahead_offset = 0;
                    ahead_block++;
                }
            }
            if (kind == FLOAT32) {
                scores_of_row(q, (const float *)(kt + j * row_bytes), G, D, scale, softcap, scores + j, TILE);
            } else {
                const float key_scale = row_floats(kt + j * row_bytes, kind, D, key_row);
                scores_of_row(q, key_row, G, D, scale * key_scale, softcap, scores + j, TILE);
                value_scale[j] = row_floats(vt + j * row_bytes, kind, D, value_tile + j * D);
            }
        }
        /* the value rows the weighted sums read: the pool's floats, or the tile's converted rows */
        const float *values = kind == FLOAT32 ? (const float *)vt : value_tile;
        const int64_t value_stride = kind == FLOAT32 ? row_bytes / (int64_t)sizeof(float) : D;
        for (int g = 0; g < G; g++) {
            float *sg = scores + g * TILE, top = m[g];
            for (int64_t j = 0; j < n; j++) top = sg[j] > top ? sg[j] : top;
            const float fix = expf(m[g] - top);
            m[g] = top;
            float *restrict ag = acc + (int64_t)g * D;
            if (fix != 1.0f) {
                l[g] *= fix;
                for (int d = 0; d < D; d++) ag[d] *= fix;
            }
            int64_t j = 0;
            for (; j + LANES <= n; j += LANES) {
                vf x = vexp(load(sg + j) - top);
                store(sg + j, x);
            }
            for (; j < n; j++) sg[j] = expf(sg[j] - top);
            float sum = 0.0f;
            for (j = 0; j < n; j++) sum += sg[j];
            l[g] += sum;
            /* a quantized value row's scale goes into its weight */
            if (kind != FLOAT32)
                for (j = 0; j < n; j++) sg[j] *= value_scale[j];
            if (D % LANES == 0 && D <= 256) {
                /* the query head's weighted sum in registers for the whole tile (D a constant here) */
                vf a[256 / LANES];
                for (int c = 0; c < D / LANES; c++) a[c] = load(ag + c * LANES);
                for (j = 0; j < n; j++) {
                    const float w = sg[j];
                    const float *restrict vj = values + j * value_stride;
                    for (int c = 0; c < D / LANES; c++) a[c] += w * load(vj + c * LANES);
                }
                for (int c = 0; c < D / LANES; c++) store(ag + c * LANES, a[c]);
            } else {
                for (j = 0; j < n; j++) {
                    const float w = sg[j];
                    const float *restrict vj = values + j * value_stride;
                    for (int d = 0; d < D; d++) ag[d] += w * vj[d];
                }
            }
        }
        t += n;
    }
}

/* the common head sizes with D a constant, so the loops above unroll */
static inline __attribute__((always_inline)) void attend_range_of(const float *q, const uint8_t *k,
                                                                  const uint8_t *v, int kind,
                                                                  const int64_t *table, int64_t t0, int64_t t1,
                                                                  int block_size, int G, int D, float scale,
                                                                  float softcap, float *m, float *l,
                                                                  float *acc) {
    switch (D) {
    case 64:
        attend_range(q, k, v, kind, table, t0, t1, block_size, G, 64, scale, softcap, m, l, acc);
        break;
    case 128:
        attend_range(q, k, v, kind, table, t0, t1, block_size, G, 128, scale, softcap, m, l, acc);
        break;
    case 256:
        attend_range(q, k, v, kind, table, t0, t1, block_size, G, 256, scale, softcap, m, l, acc);
        break;
    default:
        attend_range(q, k, v, kind, table, t0, t1, block_size, G, D, scale, softcap, m, l, acc);
    }
}

/* each storage kind a constant, so the float32 loops carry nothing of the quantized ones */
static void attend_range_any(const float *q, const uint8_t *k, const uint8_t *v, int kind, const int64_t *table,
                             int64_t t0, int64_t t1, int block_size, int G, int D, float scale, float softcap,
                             float *m, float *l, float *acc) {
    if (kind == INT8)
        attend_range_of(q, k, v, INT8, table, t0, t1, block_size, G, D, scale, softcap, m, l, acc);
    else if (kind == FP8_E4M3)
        attend_range_of(q, k, v, FP8_E4M3, table, t0, t1, block_size, G, D, scale, softcap, m, l, acc);
    else
        attend_range_of(q, k, v, FLOAT32, table, t0, t1, block_size, G, D, scale, softcap, m, l, acc);
}

/* q [N, Hkv, G, D]; keys / values [Hkv, slots, D]; tables [N, width] block ids; lengths [N] positions each
   sequence reads (its own included); window > 0: only the last `window` of them; softcap > 0: capped scores.
   out [N, Hkv, G, D]. Returns 0, or without reading anything: 1 where a length is < 1 or needs more blocks than
   its table row holds, 2 where a block it would read lies outside the pool, 3 when out of memory. */
static int decode(const float *q, const uint8_t *keys, const uint8_t *values, int kind, int64_t slots,
                  const int64_t *tables, int64_t width, const int64_t *lengths, int N, int Hkv, int G, int D,
                  int block_size, float scale, int64_t window, float softcap, int threads, float *out) {
    const int64_t row_bytes = kind == FLOAT32 ? (int64_t)D * sizeof(float) : D + (int64_t)sizeof(float);
    /* a wrong table would read outside the pool: refuse it (N x width integers, nothing next to the K/V) */
    int64_t longest = 0;
    for (int n = 0; n < N; n++) {
        if (lengths[n] < 1 || lengths[n] > width * block_size) return 1;
        for (int64_t b = 0; b < (lengths[n] - 1) / block_size + 1; b++) {
            const int64_t block = tables[n * width + b];
            if (block < 0 || block >= slots / block_size) return 2;
        }
        longest = lengths[n] > longest ? lengths[n] : longest;
    }
    if (N < 1 || Hkv < 1) return 0;
    /* enough ranges for every core: about 4 per thread, none shorter than two blocks */
    int splits = (4 * threads + N * Hkv - 1) / (N * Hkv);
    const int64_t most = longest / (2 * block_size);
    if (splits > most) splits = (int)most;
    if (splits < 1) splits = 1;
    const int64_t tasks = (int64_t)N * Hkv * splits;
    float *part = (float *)malloc(sizeof(float) * tasks * G * (D + 2));
    if (part == NULL) return 3;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t task = 0; task < tasks; task++) {
        const int n = (int)(task / (Hkv * splits)), h = (int)(task / splits % Hkv), r = (int)(task % splits);
        const int64_t end = lengths[n];
        const int64_t start = window > 0 && end > window ? end - window : 0;
        /* ranges on block boundaries */
        const int64_t first = start / block_size, blocks = (end - 1) / block_size + 1 - first;
        const int64_t b0 = first + blocks * r / splits, b1 = first + blocks * (r + 1) / splits;
        int64_t t0 = b0 * block_size, t1 = b1 * block_size;
        t0 = t0 < start ? start : t0;
        t1 = t1 > end ? end : t1;
        float *mine = part + task * G * (D + 2);
        attend_range_any(q + ((int64_t)n * Hkv + h) * G * D, keys + h * slots * row_bytes,
                         values + h * slots * row_bytes, kind, tables + (int64_t)n * width, t0, t1, block_size,
                         G, D, scale, softcap, mine, mine + G, mine + 2 * G);
    }
    /* merge each (n, h, g)'s ranges by their log-sum-exps */
    for (int64_t nh = 0; nh < (int64_t)N * Hkv; nh++) {
        for (int g = 0; g < G; g++) {
            float top = -INFINITY, total = 0.0f;
            for (int r = 0; r < splits; r++) {
                const float *mine = part + (nh * splits + r) * G * (D + 2);
                top = mine[g] > top ? mine[g] : top;
            }
            float *o = out + (nh * G + g) * D;
            memset(o, 0, sizeof(float) * D);
            for (int r = 0; r < splits; r++) {
                const float *mine = part + (nh * splits + r) * G * (D + 2);
                if (mine[G + g] == 0.0f) continue;
                const float w = expf(mine[g] - top);
                total += mine[G + g] * w;
                const float *a = mine + 2 * G + (int64_t)g * D;
                for (int d = 0; d < D; d++) o[d] += w * a[d];
            }
            for (int d = 0; d < D; d++) o[d] /= total;
        }
    }
    free(part);
    return 0;
}

int paged_decode(const float *q, const float *keys, const float *values, int64_t slots, const int64_t *tables,
                 int64_t width, const int64_t *lengths, int N, int Hkv, int G, int D, int block_size, float scale,
                 int64_t window, float softcap, int threads, float *out) {
    return decode(q, (const uint8_t *)keys, (const uint8_t *)values, FLOAT32, slots, tables, width, lengths, N,
                  Hkv, G, D, block_size, scale, window, softcap, threads, out);
}

/* the same over quantized rows: keys / values [Hkv, slots, D + 4] bytes, kind 1 int8, 2 float8 e4m3fn */
int paged_decode_8bit(const float *q, const uint8_t *keys, const uint8_t *values, int kind, int64_t slots,
                      const int64_t *tables, int64_t width, const int64_t *lengths, int N, int Hkv, int G, int D,
                      int block_size, float scale, int64_t window, float softcap, int threads, float *out) {
    if (kind != INT8 && kind != FP8_E4M3) return 4;
    return decode(q, keys, values, kind, slots, tables, width, lengths, N, Hkv, G, D, block_size, scale, window,
                  softcap, threads, out);
}

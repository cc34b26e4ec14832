/* y = x W^T + b, float32 on the CPU, from W repacked into panels of one vector's outputs, summed in a given order.

   W is repacked once (panel_linear.py): panel[p][k][0..L-1] = W[Lp .. Lp + L - 1][k] for L = LANES, the
   vector's floats, so a panel is one sequential stream, and each vector load of it is multiplied into L
   outputs of a row by a broadcast of x[m][k]: no horizontal sums, one accumulator per (row, panel).

   The order of the sums is the caller's: every output is ((b + s_1) + s_2) + ..., where s_j sums the products
   of block j (k in [ends[j-1], ends[j])) one by one with fused multiply-adds, from zero. That is the order of
   MKL's sgemm on the CPUs where panel_linear.py's probe finds the two equal bit for bit; then this kernel is
   transformers' own linear, only faster, and the engine's logits do not move.

   Two shapes of work:
   - few rows (a decode step, 1-8 rows): bound by reading the weights, so each weight is read once and every
     row's work done on it while it is in a register, several panels at a time so enough multiply-adds are in
     flight;
   - many rows (prefill): bound by the multiply-adds, so tiles of TILE_ROWS x TILE_PANELS accumulators, one
     block of k at a time so the block's panels (TILE_PANELS x 192 vectors) stay in L1 over every tile of rows;
     the block's sums are added into y.
   Built by build.py for the target's vector width and fused multiply-adds (-ffp-contract).
*/
#include <stdint.h>
#include <string.h>

#include "vectors.h"

/* Register blocking follows the target's vector register file (vectors.h): a panel is one vector of LANES
   outputs, and a tile's TILE_ROWS x TILE_PANELS accumulators, its TILE_PANELS weight vectors and a broadcast
   fit the registers. The sums' order does not depend on the width. */
#if VECTOR_REGISTERS == 32 && defined(__aarch64__)
/* NEON: a row's broadcast takes a register of its own, so 6 x 3 accumulators + 3 weights + 6 rows' values */
#define TILE_ROWS 6
#define TILE_PANELS 3
#elif VECTOR_REGISTERS == 32
/* AVX-512: 8 x 3 accumulators */
#define TILE_ROWS 8
#define TILE_PANELS 3
#else
/* AVX2, SSE: 6 x 2 accumulators (the 6 x 16 tile of BLIS's Haswell kernel on AVX2) */
#define TILE_ROWS 6
#define TILE_PANELS 2
#endif

#define FEW_ROWS 8
/* how far ahead a few-row pass prefetches its weights (4 KB): the pass's multiply-adds and the memory's
   reads then overlap (measured on SmolLM2 at 8 rows: an AVX2 build's step 43 -> 26 ms, AVX-512's about 24
   either way) */
#ifndef PREFETCH_FLOATS
#define PREFETCH_FLOATS 1024
#endif
/* BY_ROWS_AND_PANELS covers 1..8 rows and 1..4 panels: a larger M, R or P would compute nothing */
_Static_assert(FEW_ROWS == 8 && TILE_ROWS <= 8 && TILE_PANELS <= 4, "the dispatch covers 1..8 rows, 1..4 panels");

/* panels a few-row pass takes for M rows: as many as keep M x P partial sums, P weights and the rows' broadcasts
   in the registers, at most 4. On x86 a broadcast is one register used in turn; NEON multiplies by a lane of a
   register holding the row's value, one per row. AVX-512's rule is measured on SmolLM2's shapes (4 panels for
   up to 4 rows, 3 for up to 8). */
#if defined(__aarch64__)
#define BROADCASTS(M) (M)
#else
#define BROADCASTS(M) 1
#endif
static inline int few_panels(int M) {
    const int fit = (VECTOR_REGISTERS - BROADCASTS(M)) / (M + 1);
#if defined(__AVX512F__)
    (void)fit;
    return M <= 4 ? 4 : 3;
#else
    return fit > 4 ? 4 : (fit < 1 ? 1 : fit);
#endif
}

/* the outputs of one panel (pack() in panel_linear.py lays the weights out by it) */
int panel_lanes(void) { return LANES; }

/* the first `width` lanes of v to / from p (the last panel of an N that is not a multiple of LANES) */
static inline void store_part(float *p, vf v, int64_t width) {
    if (width == LANES)
        store(p, v);
    else
        memcpy(p, &v, (size_t)width * sizeof(float));
}

static inline vf load_part(const float *p, int64_t width) {
    vf v = {0};
    if (width == LANES)
        v = load(p);
    else
        memcpy(&v, p, (size_t)width * sizeof(float));
    return v;
}

/* CALL(r, p) for r = rows (1..8) and p = panels (1..4) as constants, so that every loop over them unrolls and
   the accumulators stay in registers */
#define BY_PANELS(r, P, CALL)                                                                                  \
    case r:                                                                                                    \
        if ((P) == 4)                                                                                          \
            CALL(r, 4);                                                                                        \
        else if ((P) == 3)                                                                                     \
            CALL(r, 3);                                                                                        \
        else if ((P) == 2)                                                                                     \
            CALL(r, 2);                                                                                        \
        else                                                                                                   \
            CALL(r, 1);                                                                                        \
        break;
#define BY_ROWS_AND_PANELS(R, P, CALL)                                                                         \
    switch (R) {                                                                                               \
        BY_PANELS(1, P, CALL) BY_PANELS(2, P, CALL) BY_PANELS(3, P, CALL) BY_PANELS(4, P, CALL)                \
        BY_PANELS(5, P, CALL) BY_PANELS(6, P, CALL) BY_PANELS(7, P, CALL) BY_PANELS(8, P, CALL)                \
    }

/* ----------------------------------------------------------------------------------------------- few rows */

/* outputs [LANES p, LANES (p + P)) of rows 0..M-1, P panels at once (M and P constants after inlining); init: the
   bias of those outputs, or NULL */
static inline __attribute__((always_inline)) void few(const float *restrict x, int M, int64_t K,
                                                      const float *restrict w, int P, const float *init,
                                                      const int64_t *ends, int blocks, float *restrict acc) {
    vf a[FEW_ROWS * 4], part[FEW_ROWS * 4];
    for (int m = 0; m < M; m++)
        for (int p = 0; p < P; p++) a[m * P + p] = init != NULL ? load(init + p * LANES) : (vf){0};
    int64_t k0 = 0;
    for (int j = 0; j < blocks; j++) {
        const int64_t k1 = ends[j];
        for (int i = 0; i < M * P; i++) part[i] = (vf){0};
        for (int64_t k = k0; k < k1; k++) {
            for (int p = 0; p < P; p++) {
                /* the weights stream from memory once: fetch PREFETCH_FLOATS ahead of the multiply-adds */
                __builtin_prefetch(w + ((int64_t)p * K + k) * LANES + PREFETCH_FLOATS);
                const vf wk = load(w + ((int64_t)p * K + k) * LANES);
                for (int m = 0; m < M; m++) part[m * P + p] += x[m * K + k] * wk;
            }
        }
        for (int i = 0; i < M * P; i++) a[i] += part[i];
        k0 = k1;
    }
    for (int i = 0; i < M * P; i++) memcpy(acc + (int64_t)i * LANES, &a[i], sizeof a[i]);
}

static void few_any(const float *x, int M, int64_t K, const float *w, int P, const float *init,
                    const int64_t *ends, int blocks, float *acc) {
#define FEW(m, p) few(x, m, K, w, p, init, ends, blocks, acc)
    BY_ROWS_AND_PANELS(M, P, FEW)
#undef FEW
}

static void few_rows(const float *x, int M, int64_t K, const float *packed, int64_t N, const float *bias,
                     const int64_t *ends, int blocks, float *y, int threads) {
    const int64_t count = (N + LANES - 1) / LANES;
    /* few rows leave the multiply-adds of one panel waiting on each other: more panels per pass */
    const int P = few_panels(M);
    const int64_t passes = (count + P - 1) / P;
#pragma omp parallel for schedule(static) num_threads(threads) if (passes > 4)
    for (int64_t pass = 0; pass < passes; pass++) {
        const int64_t first = pass * P;
        const int here = first + P <= count ? P : (int)(count - first);
        float init[4 * LANES] = {0};
        if (bias != NULL)
            for (int64_t i = first * LANES; i < (first + here) * LANES && i < N; i++) init[i - first * LANES] = bias[i];
        float acc[FEW_ROWS * 4 * LANES];
        few_any(x, M, K, packed + first * K * LANES, here, bias != NULL ? init : NULL, ends, blocks, acc);
        for (int m = 0; m < M; m++)
            for (int p = 0; p < here; p++) {
                const int64_t n0 = (first + p) * LANES;
                const int64_t width = N - n0 < LANES ? N - n0 : LANES;
                memcpy(y + m * N + n0, acc + ((int64_t)m * here + p) * LANES, (size_t)width * sizeof(float));
            }
    }
}

/* ---------------------------------------------------------------------------------------------- many rows */

/* the block [k0, k1) of rows m0..m0+R-1 into P panels (R and P constants after inlining): y = base + sums,
   base = the bias (or 0) for the first block, y itself after */
static inline __attribute__((always_inline)) void tile(const float *restrict x, int64_t m0, int R, int64_t K,
                                                       const float *restrict w, int P, int64_t k0, int64_t k1,
                                                       float *restrict y, int64_t N, int64_t n0,
                                                       const float *bias, int first_block) {
    vf acc[FEW_ROWS * 4];
    for (int i = 0; i < R * P; i++) acc[i] = (vf){0};
    const float *xr = x + m0 * K;
    for (int64_t k = k0; k < k1; k++) {
        vf wk[4];
        for (int p = 0; p < P; p++) wk[p] = load(w + ((int64_t)p * K + k) * LANES);
        for (int r = 0; r < R; r++) {
            const float xk = xr[r * K + k];
            for (int p = 0; p < P; p++) acc[r * P + p] += xk * wk[p];
        }
    }
    for (int p = 0; p < P; p++) {
        const int64_t n = n0 + p * LANES;
        if (n >= N) break;
        const int64_t width = N - n < LANES ? N - n : LANES;
        for (int r = 0; r < R; r++) {
            float *out = y + (m0 + r) * N + n;
            vf base;
            if (!first_block)
                base = load_part(out, width);
            else
                base = bias != NULL ? load_part(bias + n, width) : (vf){0};
            store_part(out, base + acc[r * P + p], width);
        }
    }
}

static void tile_any(const float *x, int64_t m0, int R, int64_t K, const float *w, int P, int64_t k0, int64_t k1,
                     float *y, int64_t N, int64_t n0, const float *bias, int first_block) {
#define TILE(r, p) tile(x, m0, r, K, w, p, k0, k1, y, N, n0, bias, first_block)
    BY_ROWS_AND_PANELS(R, P, TILE)
#undef TILE
}

static void many_rows(const float *x, int64_t M, int64_t K, const float *packed, int64_t N, const float *bias,
                      const int64_t *ends, int blocks, float *y, int threads) {
    const int64_t count = (N + LANES - 1) / LANES;
    const int64_t groups = (count + TILE_PANELS - 1) / TILE_PANELS;
    /* work in (group of panels, part of the rows): a few groups (192 outputs: 4) still keep every thread busy */
    const int64_t tiles = (M + TILE_ROWS - 1) / TILE_ROWS;
    int64_t parts = (4 * (int64_t)threads + groups - 1) / groups;
    parts = parts < 1 ? 1 : (parts > tiles ? tiles : parts);
    const int64_t per_part = (tiles + parts - 1) / parts * TILE_ROWS;
#pragma omp parallel for schedule(static) num_threads(threads) if (groups * parts > 1)
    for (int64_t unit = 0; unit < groups * parts; unit++) {
        const int64_t g = unit / parts, first = g * TILE_PANELS;
        const int64_t row0 = unit % parts * per_part, row1 = row0 + per_part < M ? row0 + per_part : M;
        const int here = first + TILE_PANELS <= count ? TILE_PANELS : (int)(count - first);
        const float *w = packed + first * K * LANES;
        int64_t k0 = 0;
        for (int j = 0; j < blocks; j++) {
            for (int64_t m0 = row0; m0 < row1; m0 += TILE_ROWS) {
                const int R = row1 - m0 < TILE_ROWS ? (int)(row1 - m0) : TILE_ROWS;
                tile_any(x, m0, R, K, w, here, k0, ends[j], y, N, first * LANES, bias, j == 0);
            }
            k0 = ends[j];
        }
    }
}

/* x [M, K] rows; packed [ceil(N / LANES), K, LANES]; bias [N] or NULL; ends: the blocks' ends, increasing, the last
   K; y [M, N]. Returns 0, or 1 for arguments out of range (nothing written). */
int panel_linear(const float *x, int64_t M, int64_t K, const float *packed, int64_t N, const float *bias,
                 const int64_t *ends, int blocks, float *y, int threads) {
    if (M < 1 || K < 1 || N < 1 || blocks < 1 || ends[blocks - 1] != K) return 1;
    for (int j = 0; j < blocks; j++)
        if (ends[j] <= (j > 0 ? ends[j - 1] : 0)) return 1;
    if (M <= FEW_ROWS)
        few_rows(x, (int)M, K, packed, N, bias, ends, blocks, y, threads);
    else
        many_rows(x, M, K, packed, N, bias, ends, blocks, y, threads);
    return 0;
}

/* The slot tree's loop of stack_pass.py (CurveBuilder._fenwick): for each request with blocks, in arrival
 * order, each run's distance (the weight last referenced after the run's slot), then the runs' weight moved
 * from their old slots to the request's own. The tree covers every slot of the batch before the call. */
#include <stdint.h>

int stack_runs(int64_t *tree, int64_t size, int64_t live, const int64_t *run_slot, const int64_t *run_weight,
               const int64_t *pointer, const int64_t *request_weight, const int64_t *seen_weight,
               const int64_t *busy, int64_t busy_count, int64_t first_index, int64_t *out, int64_t *live_out) {
    for (int64_t b = 0; b < busy_count; b++) {
        int64_t r = busy[b];
        int64_t slot = first_index + r + 1;
        if (slot > size) return 1;
        for (int64_t k = pointer[r]; k < pointer[r + 1]; k++) {
            int64_t prefix = 0;
            for (int64_t i = run_slot[k]; i; i &= i - 1) prefix += tree[i];
            out[k] = live - prefix;
        }
        for (int64_t k = pointer[r]; k < pointer[r + 1]; k++) {
            for (int64_t i = run_slot[k]; i <= size; i += i & -i) tree[i] -= run_weight[k];
        }
        for (int64_t i = slot; i <= size; i += i & -i) tree[i] += request_weight[r];
        live += request_weight[r] - seen_weight[r];
    }
    *live_out = live;
    return 0;
}

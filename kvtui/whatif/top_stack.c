/* The exact top of the prefix stack (top_stack.py): the stack positions up to `kmax` of every block reference,
 * in memory bounded by kmax and the longest request, whatever the trace's size.
 *
 * The stack is ordered by last request (newest first), then by depth: a block of request slot P at depth d is
 * at position 1 + (live blocks of newer slots) + d - (the depth of P's shallowest live block). A later request
 * that references a block references its prefix too, so a slot's live blocks are the deepest `live` of its
 * request. Positions only grow until a block is referenced again, so a slot with kmax live blocks above it is
 * dropped whole: its blocks can never be within kmax again before their next reference, which then starts
 * them afresh at the top. Slots are numbered in arrival order in a Fenwick tree of live counts, renumbered
 * from 1 when the numbers run out. Blocks are found by their prefix hash in a linear-probing table. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t key;
    int32_t slot;
} Entry;

typedef struct {
    /* the request's blocks, those still here, its number in the tree, the depth of hashes[0] */
    int64_t n, live, number, first;
    int32_t older, newer;
    uint64_t *hashes;
} Slot;

typedef struct {
    int64_t kmax;
    Entry *table;
    int64_t mask, used;
    Slot *slots;
    int32_t slot_cap, free_slot;
    int32_t newest, oldest;
    int64_t live;
    int64_t *tree;
    int64_t tree_size, next_number;
    int32_t *found;
    int64_t found_cap;
} TopStack;

static void tree_add(TopStack *s, int64_t i, int64_t v) {
    for (; i <= s->tree_size; i += i & -i) s->tree[i] += v;
}

static int64_t tree_prefix(const TopStack *s, int64_t i) {
    int64_t sum = 0;
    for (; i; i &= i - 1) sum += s->tree[i];
    return sum;
}

static int64_t find(const TopStack *s, uint64_t key) {
    int64_t i = (int64_t)(key & (uint64_t)s->mask);
    while (s->table[i].slot >= 0) {
        if (s->table[i].key == key) return i;
        i = (i + 1) & s->mask;
    }
    return -1 - i;
}

static int grow_table(TopStack *s) {
    int64_t size = (s->mask + 1) * 2;
    Entry *old = s->table;
    int64_t old_size = s->mask + 1;
    Entry *table = malloc(sizeof(Entry) * size);
    if (!table) return 1;
    for (int64_t i = 0; i < size; i++) table[i].slot = -1;
    s->table = table;
    s->mask = size - 1;
    for (int64_t i = 0; i < old_size; i++) {
        if (old[i].slot < 0) continue;
        int64_t at = find(s, old[i].key);
        s->table[-1 - at] = old[i];
    }
    free(old);
    return 0;
}

/* backward-shift deletion: the entries after it that probed past it move back */
static void erase(TopStack *s, int64_t i) {
    int64_t j = i;
    for (;;) {
        j = (j + 1) & s->mask;
        if (s->table[j].slot < 0) break;
        int64_t home = (int64_t)(s->table[j].key & (uint64_t)s->mask);
        if (((j - home) & s->mask) >= ((j - i) & s->mask)) {
            s->table[i] = s->table[j];
            i = j;
        }
    }
    s->table[i].slot = -1;
    s->used--;
}

static int32_t new_slot(TopStack *s) {
    if (s->free_slot < 0) {
        int32_t cap = s->slot_cap * 2;
        Slot *slots = realloc(s->slots, sizeof(Slot) * cap);
        if (!slots) return -1;
        s->slots = slots;
        for (int32_t i = s->slot_cap; i < cap; i++) slots[i].older = i + 1 < cap ? i + 1 : -1;
        s->free_slot = s->slot_cap;
        s->slot_cap = cap;
    }
    int32_t at = s->free_slot;
    s->free_slot = s->slots[at].older;
    return at;
}

/* a slot's shallow blocks that moved away no longer hold memory once they are most of it */
static int shrink(Slot *slot) {
    int64_t held = slot->n - slot->first, keep = slot->n - slot->live;
    if (held < 64 || 4 * slot->live >= held) return 0;
    uint64_t *hashes = malloc(sizeof(uint64_t) * slot->live);
    if (!hashes) return 1;
    memcpy(hashes, slot->hashes + (keep - slot->first), sizeof(uint64_t) * slot->live);
    free(slot->hashes);
    slot->hashes = hashes;
    slot->first = keep;
    return 0;
}

static void unlink_slot(TopStack *s, int32_t at) {
    Slot *slot = &s->slots[at];
    if (slot->older >= 0) s->slots[slot->older].newer = slot->newer;
    else s->oldest = slot->newer;
    if (slot->newer >= 0) s->slots[slot->newer].older = slot->older;
    else s->newest = slot->older;
    free(slot->hashes);
    slot->hashes = NULL;
    slot->older = s->free_slot;
    s->free_slot = at;
}

/* slots numbered 1.. again in arrival order, in a tree with room for as many again */
static int renumber(TopStack *s) {
    int64_t count = 0;
    for (int32_t at = s->oldest; at >= 0; at = s->slots[at].newer) count++;
    int64_t size = 1024;
    while (size < 2 * count + 1024) size *= 2;
    int64_t *tree = calloc(size + 1, sizeof(int64_t));
    if (!tree) return 1;
    free(s->tree);
    s->tree = tree;
    s->tree_size = size;
    int64_t number = 0;
    for (int32_t at = s->oldest; at >= 0; at = s->slots[at].newer) {
        s->slots[at].number = ++number;
        tree_add(s, number, s->slots[at].live);
    }
    s->next_number = number + 1;
    return 0;
}

TopStack *top_stack_new(int64_t kmax) {
    TopStack *s = calloc(1, sizeof(TopStack));
    if (!s) return NULL;
    s->kmax = kmax;
    s->mask = 1023;
    s->table = malloc(sizeof(Entry) * 1024);
    s->slot_cap = 64;
    s->slots = malloc(sizeof(Slot) * 64);
    if (!s->table || !s->slots) return NULL;
    for (int64_t i = 0; i < 1024; i++) s->table[i].slot = -1;
    for (int32_t i = 0; i < 64; i++) s->slots[i].older = i + 1 < 64 ? i + 1 : -1;
    s->newest = s->oldest = -1;
    if (renumber(s)) return NULL;
    return s;
}

void top_stack_free(TopStack *s) {
    if (!s) return;
    for (int32_t at = s->oldest; at >= 0; at = s->slots[at].newer) free(s->slots[at].hashes);
    free(s->table);
    free(s->slots);
    free(s->tree);
    free(s->found);
    free(s);
}

static int add_request(TopStack *s, const uint64_t *hashes, const uint8_t *may_hit, int64_t n, int64_t *hist) {
    if (n > s->found_cap) {
        free(s->found);
        s->found_cap = n * 2;
        s->found = malloc(sizeof(int32_t) * s->found_cap);
        if (!s->found) return 1;
    }
    /* every position against the stack as the request finds it */
    for (int64_t d = 0; d < n; d++) {
        int64_t at = find(s, hashes[d]);
        s->found[d] = -1;
        if (at < 0) continue;
        int32_t slot_at = s->table[at].slot;
        const Slot *slot = &s->slots[slot_at];
        s->found[d] = slot_at;
        int64_t position = 1 + s->live - tree_prefix(s, slot->number) + d - (slot->n - slot->live);
        if (position <= s->kmax && may_hit[d]) hist[position]++;
    }
    if (s->next_number > s->tree_size && renumber(s)) return 1;
    int32_t at = new_slot(s);
    if (at < 0) return 1;
    Slot *slot = &s->slots[at];
    slot->n = slot->live = n;
    slot->number = s->next_number++;
    slot->hashes = malloc(sizeof(uint64_t) * (n ? n : 1));
    if (!slot->hashes) return 1;
    memcpy(slot->hashes, hashes, sizeof(uint64_t) * n);
    slot->first = 0;
    slot->older = s->newest;
    slot->newer = -1;
    if (s->newest >= 0) s->slots[s->newest].newer = at;
    else s->oldest = at;
    s->newest = at;
    /* the request's blocks move to its own slot */
    for (int64_t d = 0; d < n; d++) {
        int32_t old = s->found[d];
        int64_t e = find(s, hashes[d]);
        if (old >= 0 && e >= 0 && s->table[e].slot == old) {
            s->table[e].slot = at;
            tree_add(s, s->slots[old].number, -1);
            s->live--;
            if (!--s->slots[old].live) unlink_slot(s, old);
            else if (shrink(&s->slots[old])) return 1;
            continue;
        }
        /* a hash twice in one request (a 64-bit collision) is kept once */
        if (e >= 0) continue;
        if (2 * (s->used + 1) > s->mask + 1) {
            if (grow_table(s)) return 1;
            e = find(s, hashes[d]);
        }
        s->table[-1 - e].key = hashes[d];
        s->table[-1 - e].slot = at;
        s->used++;
    }
    tree_add(s, s->slots[at].number, n);
    s->live += n;
    /* slots with kmax live blocks above them leave for good */
    while (s->oldest != s->newest && s->live - s->slots[s->oldest].live >= s->kmax) {
        int32_t old = s->oldest;
        Slot *gone = &s->slots[old];
        for (int64_t d = gone->n - gone->live; d < gone->n; d++) {
            int64_t e = find(s, gone->hashes[d - gone->first]);
            if (e >= 0 && s->table[e].slot == old) erase(s, e);
        }
        tree_add(s, gone->number, -gone->live);
        s->live -= gone->live;
        unlink_slot(s, old);
    }
    return 0;
}

/* the blocks held now (at most kmax and a request's) */
int64_t top_stack_held(const TopStack *s) { return s->used; }

/* requests i of a flat batch: hashes[starts[i]:starts[i + 1]]; hist[p] counts the references that may hit at
 * position p <= kmax (hist has kmax + 1 places) */
int top_stack_add(TopStack *s, const uint64_t *hashes, const int64_t *starts, int64_t requests,
                  const uint8_t *may_hit, int64_t *hist) {
    for (int64_t r = 0; r < requests; r++) {
        int64_t begin = starts[r];
        if (add_request(s, hashes + begin, may_hit + begin, starts[r + 1] - begin, hist)) return 1;
    }
    return 0;
}

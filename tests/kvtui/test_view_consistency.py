"""Every figure a view shows agrees with the others: over every fixture trace, at a few cursor positions, each
view is rendered headless (its lines, as the app draws them) and the identities checked:
- the pool legend's counts = the pool's blocks by the state the grid draws them in;
- each block table's rows = the block count its header gives (held, kept by the tree, or to be hit);
- the formula's bytes = tokens held x the header's bytes per token, and its spelled-out arithmetic is that figure;
- the miss explainer's hit + missed tokens = 100% of the request's prompt tokens, and the metrics tab's token
  hit rate = `kvtui stats`'s;
- the metrics tab's hit tokens by tier = the trace's own (what `kvtui stats` prints under tiers)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from engine.trace.stats import summarize, tier_totals
from kvtui.app.loader import load_trace
from kvtui.state.kv_bytes import header_shape
from kvtui.state.timeline import Timeline
from kvtui.whatif.causes import ledger_from_trace
from kvtui.widgets.base import View, fmt_bytes
from kvtui.widgets.block_pool import pool_legend
from kvtui.widgets.block_table import BlockTableView
from kvtui.widgets.charts import ChartsView, memory_lines, tier_lines
from kvtui.widgets.miss import explain
from kvtui.widgets.timeline import request_summary

TRACES = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "traces").glob("*.jsonl"))
# where the cursor is put: a quarter, half, three quarters and the end of the trace (and see `trace`)
FRACTIONS = (0.25, 0.5, 0.75, 1.0)
# requests whose block table is drawn at each position (the busiest traces have hundreds)
TABLES_PER_STATE = 40


@pytest.fixture(scope="module", params=TRACES, ids=[p.stem for p in TRACES])
def trace(request):
    loaded = load_trace(str(request.param))
    assert loaded.error is None
    timeline = Timeline(loaded.header, loaded.events)
    cursors = [round(f * len(loaded.events)) for f in FRACTIONS]
    # and just before the second request's first prefix lookup: it waits while the first one's blocks are there
    lookups = [k for k, ev in enumerate(loaded.events) if ev["type"] in ("prefix_match", "block_shared")]
    looked_up = list(dict.fromkeys(loaded.events[k]["request_id"] for k in lookups))
    if len(looked_up) > 1:
        cursors.append(next(k for k in lookups if loaded.events[k]["request_id"] == looked_up[1]))
    states = [timeline.state_at(k) for k in cursors]
    return loaded, states, states[len(FRACTIONS) - 1]


def test_the_pool_legend_counts_each_block_once_as_the_grid_draws_it(trace):
    _, states, _ = trace
    for state in states:
        legend = pool_legend(state, View(state)).plain
        shown = {kind: int(n) for kind, n in re.findall(r"(used|shared|cached|free|writing) (\d+)", legend)}
        drawn = Counter(state.block_state(p) for p in range(state.num_blocks))
        assert shown == {kind: drawn[kind] for kind in shown}, (state.index, legend)
        assert sum(shown.values()) == state.num_blocks
        for tier, held, size in re.findall(r"(\w+) (\d+)/(\d+)", legend):
            assert int(held) == len(state.tier_slots[tier]) and int(size) == state.tier_capacity[tier]


def _table_rows(state, rid: str) -> tuple[str, list[str]]:
    widget = BlockTableView(View(state, rid))
    rows = [widget.render_line(y).text.rstrip() for y in range(widget.row_count(200))]
    return rows[0], [r for r in rows if re.match(r" L\d+\s+P\d+", r)]


def test_each_block_tables_rows_are_its_headers_blocks(trace):
    _, states, _ = trace
    for state in states:
        for rid in state.order[-TABLES_PER_STATE:]:
            header, blocks = _table_rows(state, rid)
            if kept := re.search(r"tree keeps (\d+)/[\d,]+ blocks? \((\d+) tok\)", header):
                count, tokens = int(kept[1]), int(kept[2])
            elif hit := re.search(r"will hit ([\d,]+) \(([\d,]+) blocks?\)", header):
                count, tokens = int(hit[2].replace(",", "")), int(hit[1].replace(",", ""))
            else:
                count = int(re.match(r"\S+ ([\d,]+) blocks?", header)[1].replace(",", ""))
                tokens = None
            assert len(blocks) == count, (state.index, header, blocks)
            if tokens is not None:
                fills = [int(re.search(r"(\d+)/\d+", r.split(maxsplit=2)[2])[1]) for r in blocks]
                assert sum(fills) == tokens, (state.index, header)


def test_the_formulas_bytes_are_tokens_times_bytes_per_token(trace):
    loaded, states, _ = trace
    shape = header_shape(loaded.header)
    for state in states:
        pool, formula = memory_lines(state)[:2]
        tokens = sum(state.requests[rid].num_tokens for rid in state.tables if rid in state.requests)
        bpt = state.bytes_per_token
        assert f"formula: {tokens:,} token" in formula
        assert f"× {fmt_bytes(bpt)}/token = {fmt_bytes(tokens * bpt)}" in formula
        assert f"in use {fmt_bytes(state.n_used * state.bytes_per_block)}" in pool
        # the arithmetic spelled out gives the header's figure, or the line says that they differ
        if shape is not None and shape.kv_bytes_per_token() != bpt:
            assert f"but the header says {bpt:,} B" in formula
        elif shape is not None:
            layers, heads = map(int, re.search(r"2 x (\d+) layers x (\d+) kv_heads", formula).groups())
            assert layers * heads * 2 * shape.kv_bytes_per_token_per_layer() / (2 * heads) == bpt


def test_the_miss_explainers_hit_and_missed_tokens_are_all_the_prompt(trace):
    """Against the tally the tree tab reads (kvtui/whatif/causes.py's ledger, also `kvtui stats`)."""
    loaded, _, state = trace
    ledger = ledger_from_trace(loaded.header, loaded.events)
    if ledger is None:
        pytest.skip("no prefix_match events")
    for rid, misses in ledger.requests.items():
        missed = sum(misses.all_causes().values())
        assert misses.hit_tokens + missed == misses.prompt_tokens, (rid, misses)
        req = state.requests.get(rid)
        text = explain(state, req, misses).plain
        if missed:
            assert f"({missed} of {misses.prompt_tokens} prompt tokens, whole trace)" in text
        # one lookup only (no edit, no readmission): its first line and the missed line count the same prompt
        if req is not None and not req.edits and not (req.match.get("detail") or {}).get("readmission"):
            hit = f"{misses.hit_tokens} of {misses.prompt_tokens} prompt tokens from the cache"
            assert text.startswith(f"{rid}: {hit}"), (rid, text.splitlines()[0], hit)


def test_the_requests_tabs_cached_tokens_are_the_miss_explainers(trace):
    """A finished request's "cached N" on the requests tab counts the prompt of the lookup the tree tab explains
    ("N of M prompt tokens from the cache"): after an edit that is the edit's, not the first prompt."""
    _, states, _ = trace
    for state in states:
        for req in state.requests.values():
            match = req.match
            if req.status != "finished" or match is None:
                continue
            summary = request_summary(req).plain
            cached = re.search(r"prompt (\d+) .* cached (\d+)(?: of (\d+))?", summary)
            of = int(cached[3] or cached[1])
            assert int(cached[2]) <= of, summary
            if (match.get("detail") or {}).get("readmission"):
                continue
            explained = explain(state, req).plain
            assert f"{req.request_id}: {cached[2]} of {of} prompt tokens from the cache" in explained, (
                summary,
                explained.splitlines()[0],
            )


def test_the_generated_tokens_shown_are_ones_the_model_sampled(trace):
    """The requests tab's and the tokens tab's "generated" count sampled tokens only (a turn an edit typed in at the
    end is "typed"): their sum is at most `kvtui stats`'s generated tokens (equal where no edit dropped any)."""
    from kvtui.widgets.token_strip import TokenStrip

    loaded, _, state = trace
    everything = summarize(loaded.header, loaded.events)[-1]
    shown = 0
    for req in state.requests.values():
        summary = request_summary(req).plain
        generated = int(re.search(r"generated (\d+)", summary)[1])
        typed = re.search(r"typed (\d+)", summary)
        assert req.prompt_len + generated + (int(typed[1]) if typed else 0) == req.num_tokens, summary
        header = TokenStrip(View(state, req.request_id)).render_line(0).text
        assert f"generated  {generated}" in header and (not typed or f"typed {typed[1]}" in header), header
        shown += generated
    assert shown <= everything.generated_tokens, (shown, everything.generated_tokens)
    if not any(ev["type"] == "edit" and ev["kind"] != "insert" for ev in loaded.events):
        assert shown == everything.generated_tokens


def test_the_metrics_tabs_token_hit_rate_is_the_stats_one(trace):
    loaded, _, state = trace
    if not state.n_hits:
        return
    everything = summarize(loaded.header, loaded.events)[-1]
    charts = ChartsView(View(state))
    rows = [charts.render_line(y).text for y in range(charts.row_count(100))]
    row = next(r for r in rows if r.lstrip().startswith("token (cum)"))
    assert row.rstrip().endswith(f"{everything.hits.token_hit_rate:6.1%}".strip()), (row, everything.hits)


def test_the_tier_split_shown_is_the_traces_own(trace):
    loaded, _, state = trace
    totals = tier_totals(loaded.events)
    if not state.tier_slots:
        assert totals is None or set(totals) == {"device"}
        return
    line = tier_lines(state)[0]
    shown = {tier: int(n.replace(",", "")) for tier, n in re.findall(r"(\w+) ([\d,]+) hit tokens?", line)}
    assert shown == {tier: counts["hit_tokens"] for tier, counts in totals.items()}

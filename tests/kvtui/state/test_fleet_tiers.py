"""Residency per (worker, tier) in the fleet state, and what the explainer, the tree, the fleet table and
`kvtui stats` say of it."""

from __future__ import annotations

from kvtui.state.fleet_explain import explain_prompt
from kvtui.state.fleet_stats import format_workers, workers_summary
from kvtui.state.fleet_tiers import ordered, tier_name
from kvtui.state.fleet_view import fleet_view, tree_rows
from kvtui.widgets.fleet_table import fleet_lines
from kvtui.widgets.fleet_tree import tier_label
from tests.kvtui.state.test_state_fleet import Fleet


def offloaded():
    """Worker a: blocks 01-02 on the GPU, 02 also on CPU, 03 on CPU only; b: 01 on the GPU, 02 on disk."""
    f = Fleet()
    for w in ("a", "b"):
        f.worker(w)
    f.store("a", ["01", "02", "03"], [1, 2, 3, 4, 5, 6])
    f.store("a", ["02"], [3, 4], parent="01", medium="CPU")
    f.store("a", ["03"], [5, 6], parent="02", medium="CPU")
    f.remove("a", ["03"])
    f.store("b", ["01"], [1, 2])
    f.store("b", ["02"], [3, 4], parent="01", medium="DISK")
    return f


def test_tier_names_and_order():
    assert tier_name(None) == tier_name("GPU") == "GPU" and tier_name("cpu") == "CPU"
    assert tier_name("STORAGE", "kvcr") == "STORAGE/kvcr"
    assert ordered(["EXTERNAL", "LMCACHE", "CPU_PINNED", "GPU", "DISK"]) == [
        "GPU",
        "CPU_PINNED",
        "DISK",
        "EXTERNAL",
        "LMCACHE",
    ]


def test_residency_and_removals_per_tier():
    f = offloaded()
    a, b = f.state.workers["a"], f.state.workers["b"]
    assert a.held_tiers() == {"GPU": 2, "CPU": 2} and b.held_tiers() == {"GPU": 1, "DISK": 1}
    assert a.stored_tiers() == {"GPU": 3, "CPU": 2} and a.removed_tiers() == {"GPU": 1, "CPU": 0}
    assert a.held == 3 and a.resident == 2
    # the Mooncake connector's lower-case medium is the same tier
    f.remove("a", ["03"], medium="cpu")
    assert a.held_tiers()["CPU"] == 1 and a.held == 2
    assert f.state.nodes[(0, 3)].removed["a"][1] == "CPU"


def test_a_copy_on_one_tier_is_not_removed_by_another_tiers_removal():
    f = Fleet()
    f.worker("a")
    f.store("a", ["01"], [1, 2])
    # the same hash in a second GPU block, and once on CPU
    f.store("a", ["01"], [1, 2], parent="00")
    f.store("a", ["01"], [1, 2], medium="CPU")
    f.remove("a", ["01"], medium="CPU")
    a = f.state.workers["a"]
    assert a.held_tiers() == {"GPU": 1, "CPU": 0} and a.copies == 1
    f.remove("a", ["01"])
    assert a.held_tiers()["GPU"] == 1 and a.copies == 0


def test_explainer_says_which_tier_holds_the_prefix():
    f = offloaded()
    a, b = explain_prompt(f.state, [1, 2, 3, 4, 5, 6])
    # block 02 is on GPU and CPU: a hit is served from the GPU; 03 is on CPU alone
    assert (a["reason"], a["tiers"]) == ("full_match", {"GPU": 2, "CPU": 1})
    assert "3 block(s) = 6/6 tokens cached (GPU 2 · CPU 1)" in a["message"]
    # block 03: a holds it, on CPU (a router would load it from there)
    assert b["tiers"] == {"GPU": 1, "DISK": 1} and b["reason"] == "elsewhere"
    assert "block 2 is not here but on a (CPU)" in b["message"]
    (gpu_only,) = [r for r in explain_prompt(f.state, [1, 2]) if r["worker"] == "b"]
    assert gpu_only["message"].split(";")[0] == "b: 1 block(s) = 2/2 tokens cached"
    f.remove("b", ["02"], medium="DISK")
    b = explain_prompt(f.state, [1, 2, 3, 4])[1]
    assert b["reason"] == "removed" and b["detail"]["tier"] == "DISK"
    assert "was cached here (DISK) and removed at" in b["message"]
    f.remove("a", ["02"])
    f.worker("c")
    f.store("c", ["01"], [1, 2])
    c = explain_prompt(f.state, [1, 2, 3, 4])[2]
    assert c["detail"]["holder_tiers"] == {"a": "CPU"}


def test_store_without_token_ids_is_held_then_placed_when_its_tokens_come():
    f = Fleet()
    f.worker("a")
    # vLLM's placeholder: a hash on CPU, no parent, no tokens, block size 0
    f.store("a", ["05"], [], size=0, medium="CPU", locality="LOCAL")
    a = f.state.workers["a"]
    assert a.held_tiers() == {"GPU": 0, "CPU": 1} and a.block_size is None
    (row,) = tree_rows(f.state)
    assert row.orphan and row.text.startswith("(token ids not published") and tier_label(row) == "CPU"
    # the same hash stored with its tokens (loaded back to the GPU): now in its place in the tree
    f.store("a", ["04", "05"], [1, 2, 3, 4])
    assert (0, 5) not in f.state.orphans and f.state.nodes[(0, 5)].parent == 4
    (got,) = explain_prompt(f.state, [1, 2, 3, 4])
    assert got["reason"] == "full_match" and got["tiers"] == {"GPU": 2}


def test_tree_rows_split_where_the_tiers_change():
    f = offloaded()
    rows = {r.first_hash[-2:]: r for r in tree_rows(f.state)}
    # 01 on both workers' GPUs; 02 on a's GPU+CPU and b's disk; 03 on a's CPU
    assert rows["01"].tiers == ("GPU", "GPU") and tier_label(rows["01"]) == ""
    assert tier_label(rows["02"]) == "a:GPU+CPU b:DISK" and tier_label(rows["03"]) == "CPU"


def test_fleet_table_shows_the_tiers_below_the_gpu():
    f = offloaded()
    lines = ["".join(s.text for s in line) for line in fleet_lines(fleet_view(f.state))]
    assert "below the GPU: CPU 2 · DISK 1" in lines[0]
    assert "below GPU" in lines[4]
    assert "CPU 2 " in lines[5] and "DISK 1 " in lines[6]
    # a fleet without offloading keeps its columns
    g = Fleet()
    g.worker("a")
    g.store("a", ["01"], [1, 2])
    assert "below GPU" not in "".join(s.text for s in fleet_lines(fleet_view(g.state))[4])


def test_stats_give_residency_stores_and_removals_per_tier():
    f = offloaded()
    a = {w["worker"]: w for w in workers_summary(f.state)}["a"]
    assert a["tiers"] == {
        "GPU": {"resident_blocks": 2, "blocks_stored": 3, "blocks_removed": 1},
        "CPU": {"resident_blocks": 2, "blocks_stored": 2, "blocks_removed": 0},
    }
    text = format_workers(workers_summary(f.state))
    assert "tier" in text and any(
        line.split()[:5] == ["b", "DISK", "1", "1", "0"] for line in text.splitlines()
    )
    g = Fleet()
    g.worker("a")
    g.store("a", ["01"], [1, 2])
    assert "per tier" not in format_workers(workers_summary(g.state))

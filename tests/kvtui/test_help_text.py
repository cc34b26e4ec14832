"""What `?` says: the prefix cache as the default engine runs it, and the scrubber's marker row."""

from __future__ import annotations

import re

from kvtui.screens.help import CONCEPTS
from kvtui.widgets.scrubber import MARKS


def test_prefix_cache_reuses_partly_filled_blocks_by_default():
    prefix = CONCEPTS.split("**Prefix cache**")[1].split("\n- ")[0]
    assert "matched in whole blocks" not in prefix
    assert "partly filled" in prefix and "--whole-blocks" in prefix


def test_every_scrubber_marker_is_explained():
    section = CONCEPTS.split("## The scrubber")[1].split("\n## ")[0]
    words = {
        "arrival": "arrives",
        "edit": "edit",
        "eviction": "evicted",
        "miss": "missed",
        "preempt": "preempted",
    }
    for kind, glyph, _role in MARKS:
        # the glyph in backticks, then what it marks
        assert re.search(rf"`{glyph}` [^`]*{words[kind]}", section), (glyph, section)
    # the keys that jump to them
    assert "`a` `e` `x` `m`" in section

"""The miss explainer for attached vLLM / SGLang caches: a prompt's token ids against every worker's blocks.

We never recompute an engine's hashes (we could not: seeds, algorithms and extra keys differ); a prompt is
matched by the token ids each stored block carries, walking the chain of parent hashes from the root, one block
at a time, on the worker's own blocks. For each worker: how many leading blocks are cached, and why the match
stops:

  full_match    every full block of the prompt is cached
  block_floor   the rest is shorter than a block: engines cache whole blocks only
  divergent     a cached block starts like the prompt's but differs at `position` (both tokens shown)
  removed       the worker held exactly this block and removed it at `t` (from `tier`, the last that held it)
  elsewhere     this worker lacks the block but others hold it (a router could send the prompt there)
  lora / salt   the worker holds these tokens for another LoRA adapter / cache salt
  extra_keys    the cached block was hashed with extra keys (multimodal ids, salt, LoRA) the prompt lacks
  group         these tokens are cached in another KV-cache group (hybrid models) than the one asked
  cache_end     the worker holds nothing below the matched prefix (at the root: no cached block starts
                the prompt)
  empty         the worker holds no block at all (or never said its block size)

The salt: vLLM hashes its `cache_salt` into the first block only (`extra_keys` of block 0); every later block
carries it through its parent hash. So the salt is checked where a block carries one (vLLM's first block,
SGLang's every block), and a block below a matched one inherits it.

Tiers: a matched block may be held on the GPU, offloaded (CPU, CPU_PINNED) or in storage, often on several at
once; `tiers` counts the matched blocks by the fastest tier holding each (the one a hit is served from), and the
message names them when any is not the GPU. A view whose history is incomplete (batches
lost at a late join or in a gap, since the last restart) says so in every answer: blocks stored in what it lost
may be cached without it knowing (`caveat`).
"""

from __future__ import annotations

from engine.core.miss_explainer import common_prefix
from kvtui.state.fleet import FleetState, HashNode
from kvtui.state.fleet_tiers import GPU, fastest, ordered, tiers_text
from kvtui.state.fleet_workers import Worker


def explain_prompt(
    state: FleetState,
    token_ids: list[int],
    *,
    lora: str | None = None,
    salt: str | None = None,
    group: int | None = None,
) -> list[dict]:
    """One explanation per worker (in worker order)."""
    return [
        explain_worker(state, worker, token_ids, lora=lora, salt=salt, group=group)
        for worker in state.workers.values()
    ]


def _flat(value) -> list:
    if isinstance(value, list):
        return [x for v in value for x in _flat(v)]
    return [value]


def node_salt(node: HashNode) -> str | None:
    """The salt a block was stored under: SGLang's cache_salt, else (vLLM) a string among a first block's
    extra keys that is not its LoRA name."""
    if node.salt is not None:
        return node.salt
    if node.parent is None and node.extra is not None:
        for x in _flat(node.extra):
            if isinstance(x, str) and x != node.lora:
                return x
    return None


def _identity_ok(node: HashNode, lora: str | None, salt: str | None, inherited: bool = False) -> str | None:
    """None when the block is for this adapter and salt; else which of them differs. `inherited`: the block
    hangs below a matched one, whose hash already carries the salt (vLLM salts the first block only)."""
    if node.lora != lora:
        return "lora"
    extras = (
        [x for x in _flat(node.extra) if x is not None and x != node.lora] if node.extra is not None else []
    )
    if inherited and node.salt is None and not extras:
        return None
    # vLLM carries the salt among the extra keys
    salted_in_extras = salt is not None and salt in extras
    if node.salt != salt and not (node.salt is None and salted_in_extras):
        return "salt" if node.salt is not None or not extras else "extra_keys"
    if extras and not salted_in_extras:
        return "extra_keys"
    return None


def _text(node: HashNode, i: int) -> str | None:
    return node.texts[i] if node.texts and i < len(node.texts) else None


def explain_worker(
    state: FleetState, worker: Worker, token_ids: list[int], *, lora=None, salt=None, group=None
) -> dict:
    name = worker.worker
    size = worker.block_size
    groups = sorted(g for g, n in worker.held_by_group.items() if n)
    g = group if group is not None else (groups[0] if groups else 0)
    out = {
        "worker": name,
        "group": g,
        "block_size": size,
        "matched_blocks": 0,
        "matched_tokens": 0,
        "prompt_tokens": len(token_ids),
        "reason": "empty",
        "detail": {},
        # matched blocks by the fastest tier holding each
        "tiers": {},
    }
    if not size:
        out["message"] = f"{name}: holds no block (block size unknown)"
        return out
    parent, pos = None, 0
    nodes = state.nodes
    by_tier: dict[str, int] = {}
    while True:
        if pos + size > len(token_ids):
            out["reason"] = "full_match" if pos == len(token_ids) else "block_floor"
            out["detail"] = {"position": pos, "left": len(token_ids) - pos}
            break
        want = list(token_ids[pos : pos + size])
        kids = [nodes[(g, h)] for h in state.children.get((g, parent), ())]
        # this block of the prompt, on any worker
        same = [n for n in kids if n.token_ids == want]
        equal = [n for n in same if name in n.holders]
        good = [n for n in equal if _identity_ok(n, lora, salt, parent is not None) is None]
        if good:
            tier = fastest(good[0].holders[name])
            by_tier[tier] = by_tier.get(tier, 0) + 1
            parent = good[0].hash
            pos += size
            out["matched_blocks"] += 1
            continue
        out["detail"] = {"position": pos, "block": pos // size}
        if equal:
            node = equal[0]
            out["reason"] = _identity_ok(node, lora, salt, parent is not None)
            cached_salt = node_salt(node)
            if out["reason"] == "extra_keys" and cached_salt is not None and pos == 0:
                # vLLM's salt, read from the first block's extra keys
                out["reason"] = "salt"
            out["detail"].update(
                cached_lora=node.lora, cached_salt=cached_salt, cached_extra=node.extra, lora=lora, salt=salt
            )
            break
        removed = [n for n in same if n.removed and name in n.removed]
        if removed:
            out["reason"] = "removed"
            out["detail"]["t"], out["detail"]["tier"] = removed[0].removed[name]
            break
        others = sorted({w for n in same for w in n.holders})
        if others:
            out["detail"]["holders"] = others
            # where each holds it: a router would load it from there
            out["detail"]["holder_tiers"] = {
                w: "+".join(ordered(next(n.holders[w] for n in same if w in n.holders))) for w in others
            }
        # blocks of another size (a worker whose block size changed) cannot match; they would end the common
        # prefix with no token to show
        mine = [
            (common_prefix(n.token_ids, want), n)
            for n in kids
            if name in n.holders and len(n.token_ids) == size
        ]
        k, best = max(mine, key=lambda m: m[0]) if mine else (0, None)
        # at the root, a block that shares no first token with the prompt is no divergence: nothing starts it
        if best is not None and (k or (pos and not others)):
            out["reason"] = "divergent"
            out["detail"].update(
                position=pos + k,
                prompt_token=want[k],
                cached_token=best.token_ids[k],
                cached_text=_text(best, k),
            )
            break
        other_groups = (
            [
                x
                for x in groups
                if x != g
                and any(
                    nodes[(x, h)].token_ids == want and name in nodes[(x, h)].holders
                    for h in state.children.get((x, parent), ())
                )
            ]
            if pos == 0
            else []
        )
        if other_groups:
            out["reason"] = "group"
            out["detail"]["groups"] = other_groups
            break
        if others:
            out["reason"] = "elsewhere"
            break
        out["reason"] = "cache_end"
        break
    out["matched_tokens"] = out["matched_blocks"] * size
    out["tiers"] = {tier: by_tier[tier] for tier in ordered(by_tier)}
    if out["reason"] == "cache_end" and not worker.held:
        out["reason"] = "empty"
        out["message"] = f"{name}: holds no block"
        return out
    unseen = state.unseen(worker)
    if unseen:
        out["caveat"] = (
            f"history incomplete: {unseen} batch(es) of this worker's stream were lost (late join or gap), "
            "so blocks stored then may be cached without this view knowing"
        )
    out["message"] = _message(out)
    return out


def _message(o: dict) -> str:
    d, n = (
        o["detail"],
        f"{o['matched_blocks']} block(s) = {o['matched_tokens']}/{o['prompt_tokens']} tokens cached",
    )
    if set(o.get("tiers", ())) - {GPU}:
        n += f" ({tiers_text(o['tiers'])})"
    reason = o["reason"]
    tier = f" ({d['tier']})" if d.get("tier") and d["tier"] != GPU else ""
    holders = [
        w + (f" ({d['holder_tiers'][w]})" if d.get("holder_tiers", {}).get(w, GPU) != GPU else "")
        for w in d.get("holders", [])
    ]
    why = {
        "full_match": "every full block cached",
        "block_floor": f"the last {d.get('left')} token(s) do not fill a block of {o['block_size']}: "
        "only whole blocks are cached",
        "removed": f"block {d.get('block')} was cached here{tier} and removed at {d.get('t', 0):.2f}s",
        "elsewhere": f"block {d.get('block')} is not here but on {', '.join(holders)}",
        "lora": f"block {d.get('block')} is cached for LoRA {d.get('cached_lora')!r}, not {d.get('lora')!r}",
        "salt": f"block {d.get('block')} is cached under salt {d.get('cached_salt')!r}, not {d.get('salt')!r}",
        "extra_keys": f"block {d.get('block')} was hashed with extra keys {d.get('cached_extra')!r} "
        "(multimodal ids, salt or LoRA) that this prompt lacks",
        "group": f"these tokens are cached in group(s) {d.get('groups')}, not group {o['group']}",
        "cache_end": f"nothing cached after block {d.get('block', 0) - 1}"
        if d.get("block")
        else "no cached block starts the prompt",
    }.get(reason)
    if reason == "divergent":
        text = f" {d['cached_text']!r}" if d.get("cached_text") is not None else ""
        why = (
            f"first differing token at position {d['position']}: prompt has {d['prompt_token']}, "
            f"the cache has {d['cached_token']}{text}"
        )
        if d.get("holders"):
            why += f" (block {d['block']} is on {', '.join(holders)})"
    caveat = f" [caveat: {o['caveat']}]" if o.get("caveat") else ""
    return f"{o['worker']}: {n}; {why}{caveat}"


def vllm_hit_tokens(result: dict) -> int:
    """The tokens vLLM would serve from its cache for an explained prompt: the matched blocks, but never the
    prompt's last token (vLLM recomputes it to get logits: a hit stops at the last whole block before it)."""
    size = result.get("block_size") or 0
    if not size:
        return 0
    bound = (result["prompt_tokens"] - 1) // size * size
    return max(0, min(result["matched_tokens"], bound))


class QueryError(ValueError):
    """A prompt query that cannot be read; the text says why."""


OPTION_KEYS = ("salt", "lora", "group")


def _options_head(head: str) -> bool:
    """Whether the text before the first `|` is meant as options (`key=value` words), not prompt text such as
    a chat template's `<|im_start|>`."""
    words = head.split()
    return bool(words) and all("=" in w and not w.startswith("=") for w in words)


def parse_query(text: str, tokenizer=None) -> tuple[list[int], dict]:
    """`[salt=S] [lora=NAME] [group=G] | PROMPT`, or just PROMPT. PROMPT is token ids (`1 2 3`, or `ids: 1,2,3`),
    `@FILE` (the prompt read from a file, exactly), or, with a tokenizer, text: encoded as typed, special tokens
    (`<|im_start|>`) and newlines included, without adding any. The options part is only what stands before
    the first `|` when it is `key=value` words, so a `|` inside the prompt is text. One space after the `|` is
    the separator's. Returns (token ids, options)."""
    options: dict = {}
    head, sep, rest = text.partition("|")
    if sep and _options_head(head):
        text = rest[1:] if rest.startswith(" ") else rest
        for part in head.split():
            key, _, value = part.partition("=")
            if key not in OPTION_KEYS:
                raise QueryError(f"{part!r}: options before | are salt=S, lora=NAME, group=G")
            if key == "group":
                if not value.isdigit():
                    raise QueryError(f"group={value!r}: a group is a number")
                options[key] = int(value)
            else:
                options[key] = value
    body = text.strip()
    if body.startswith("@") and "\n" not in body and len(body.split()) == 1:
        path = body[1:]
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise QueryError(f"@{path}: cannot read the prompt file ({exc.strerror or exc})") from None
        body = text.strip()
    if body.startswith("ids:"):
        body = body[4:]
    words = body.replace(",", " ").split()
    if words and all(w.isdigit() for w in words):
        return [int(w) for w in words], options
    if tokenizer is None:
        raise QueryError("type token ids (e.g. 1 2 3), or start kvtui attach with --tokenizer to type text")
    if not body:
        raise QueryError("the prompt is empty")
    # exactly as typed: a trailing newline is a token the server saw too
    return list(tokenizer.encode(text, add_special_tokens=False)), options

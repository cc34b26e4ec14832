"""No side doors into the scheduler or the KV-cache manager: their fields are written by their own methods only.

The rule, checked on the source of engine/, kvtui/ and tests/ with ast: outside the body of `class Scheduler`
(engine/core/scheduler.py) and `class KVCacheManager` (engine/core/kv_cache.py), no statement assigns,
augments, annotates or deletes `E.f`, and no `setattr(E, "f", ...)` (monkeypatch's included) sets it, where
`f` is a field of that class (a name its methods assign on `self`, or one of its methods and properties) and
`E` is an expression naming an object of it, as the code base names them:
- a scheduler: a name or attribute called `scheduler`;
- a manager: a name or attribute called `manager`; `X.cache` where X is a name or attribute called `core`
  or `engine`; `self.cache` inside the engine core, the engine or the scheduler (which hold one).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OWNERS = {"Scheduler": ROOT / "engine/core/scheduler.py", "KVCacheManager": ROOT / "engine/core/kv_cache.py"}
# classes whose `self.cache` is a KVCacheManager
HOLDERS = {"EngineCore", "Engine", "Scheduler"}


def fields_of(class_name: str, path: Path) -> set[str]:
    """Names the class's methods assign on `self`, and its methods and properties."""
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    names = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
    return names


def _last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def owner_of(receiver: ast.expr, enclosing: str | None) -> str | None:
    """The class `receiver` names an object of, by the rule above, or None."""
    last = _last_name(receiver)
    if last == "scheduler":
        return "Scheduler"
    if last == "manager":
        return "KVCacheManager"
    if last == "cache" and isinstance(receiver, ast.Attribute):
        holder = _last_name(receiver.value)
        if holder in ("core", "engine") or (holder == "self" and enclosing in HOLDERS):
            return "KVCacheManager"
    return None


class _Writes(ast.NodeVisitor):
    """Every write of an attribute of a scheduler or manager outside its class: (line, text)."""

    def __init__(self, fields: dict[str, set[str]]):
        self.fields = fields
        self.classes: list[str] = []
        self.found: list[tuple[int, str]] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()

    def _check(self, receiver: ast.expr, field: str, line: int, text: str) -> None:
        enclosing = self.classes[-1] if self.classes else None
        owner = owner_of(receiver, enclosing)
        if owner is None or field not in self.fields[owner] or owner in self.classes:
            return
        self.found.append((line, text))

    def _targets(self, targets, line: int) -> None:
        for target in targets:
            for node in ast.walk(target):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
                    self._check(node.value, node.attr, line, ast.unparse(node))

    def visit_Assign(self, node: ast.Assign) -> None:
        self._targets(node.targets, node.lineno)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._targets([node.target], node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._targets([node.target], node.lineno)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self._targets(node.targets, node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _last_name(node.func) == "setattr" and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                self._check(node.args[0], name.value, node.lineno, ast.unparse(node))
        self.generic_visit(node)


def side_doors(source: str, fields: dict[str, set[str]]) -> list[tuple[int, str]]:
    visitor = _Writes(fields)
    visitor.visit(ast.parse(source))
    return visitor.found


def _fields() -> dict[str, set[str]]:
    return {name: fields_of(name, path) for name, path in OWNERS.items()}


def test_no_module_writes_a_field_of_the_scheduler_or_the_manager_from_outside():
    fields = _fields()
    found = []
    for folder in ("engine", "kvtui", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, text in side_doors(path.read_text(), fields):
                found.append(f"{path.relative_to(ROOT)}:{line}: {text}")
    assert not found, "written from outside its class:\n" + "\n".join(found)


def test_the_rule_sees_each_kind_of_write():
    fields = _fields()
    source = """
scheduler.running = []
core.scheduler.max_num_seqs -= 1
manager.pool: object = None
del self.core.cache.tiers
setattr(engine.cache, "prefix_cache", None)
monkeypatch.setattr(worker.scheduler, "waiting", [])
class EngineCore:
    def f(self):
        self.cache.rings = None
"""
    assert [line for line, _ in side_doors(source, fields)] == [2, 3, 4, 5, 6, 7, 10]


def test_the_rule_leaves_the_owners_and_other_objects_alone():
    fields = _fields()
    source = """
class Scheduler:
    def f(self):
        self.running = []
class KVCacheManager:
    def g(self):
        self.pool = None
manager.pool.free = []
request.num_computed = 0
cache.block_size = 4
worker.manager = manager
engine.cache.rings.snapshot_budget = 0
"""
    assert side_doors(source, fields) == []

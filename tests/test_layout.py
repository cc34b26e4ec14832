"""House rules that keep the code readable: no import circles (even under TYPE_CHECKING), packages in the layer
order docs/architecture.md writes down (no circle between packages either), no source file too long to read in
one sitting, and the torch line: engine/core and engine/trace import no torch, anywhere."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, package: str) -> set[str]:
    """Modules of `package` that `path` imports, at load time, inside a function (a deferred import is still a
    dependency) or under `if TYPE_CHECKING:` (a type in the wrong room is a circle too)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] == package}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    # 1 visiting, 2 done
    state: dict[str, int] = {}

    def visit(name, path):
        state[name] = 1
        for dep in sorted(graph.get(name, ())):
            if state.get(dep) == 1:
                return path + [name, dep]
            if dep not in state and (found := visit(dep, path + [name])):
                return found
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name, [])):
            return found
    return None


def _graph(package: str) -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in (ROOT / package).rglob("*.py")}
    return {
        name: {d for d in _imports(path, package) if d in modules and d != name}
        for name, path in modules.items()
    }


@pytest.mark.parametrize("package", ["engine", "kvtui"])
def test_no_import_circles(package):
    assert _cycle(_graph(package)) is None, " -> ".join(_cycle(_graph(package)))


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_source_file_is_too_long_to_read_in_one_sitting():
    long = {
        str(p.relative_to(ROOT)): n
        for package in ("engine", "kvtui", "tests")
        for p in (ROOT / package).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these by concept (over {MAX_LINES} lines): {long}"


# torch and what only comes with it; numpy too, which the torch-free viewer never needs
BLOCKED = ("torch", "transformers", "numpy", "accelerate", "gguf", "safetensors")
TORCH_FREE = ("engine/core", "engine/trace")

_IMPORT_ALL = """
import importlib, json, pkgutil, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(name + " is blocked: this module must not need it")
sys.meta_path.insert(0, Block())
imported, failed = [], {}
for package in PACKAGES:
    names = [package] + [package + "." + m.name for m in pkgutil.iter_modules([ROOT + "/" + package.replace(".", "/")])]
    for name in names:
        try:
            importlib.import_module(name)
            imported.append(name)
        except ImportError as exc:
            failed[name] = str(exc)
print(json.dumps({"imported": imported, "failed": failed}))
"""


def _import_with_torch_blocked(packages: list[str]) -> dict:
    code = f"BLOCKED = {BLOCKED!r}\nROOT = {str(ROOT)!r}\nPACKAGES = {packages!r}\n" + _IMPORT_ALL
    # run in the repository root: `python -c` puts the working directory first on sys.path
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_engine_core_and_trace_import_no_torch_at_import_time():
    """Every module of engine/core and engine/trace imports in a process where torch cannot be imported.
    tests/engine/core/test_kv_cache.py runs the manager and the scheduler through a workload there too."""
    result = _import_with_torch_blocked([p.replace("/", ".") for p in TORCH_FREE])
    assert not result["failed"], result["failed"]
    modules = [p for folder in TORCH_FREE for p in (ROOT / folder).glob("*.py")]
    assert len(result["imported"]) == len(modules), result["imported"]


def test_no_function_in_the_torch_free_packages_imports_torch_later():
    """A deferred import inside a function would only fail when called: none of these modules names a blocked
    package in any import, at any depth."""
    offenders = []
    for folder in TORCH_FREE:
        for path in (ROOT / folder).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else []
                )
                offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in BLOCKED]
                if isinstance(node, ast.Call) and getattr(
                    node.func, "attr", getattr(node.func, "id", "")
                ) in ("import_module", "__import__"):
                    offenders.append(f"{path.relative_to(ROOT)}: dynamic import")
    assert not offenders, offenders


def test_the_blocker_really_blocks():
    result = _import_with_torch_blocked(["engine.worker"])
    assert result["failed"], (
        "engine/worker needs torch: if it imports with torch blocked, the block is broken"
    )


# --- the package layers ------------------------------------------------------------------------------------
ARCHITECTURE = ROOT / "docs" / "architecture.md"
LAYERS_HEADING = "## Package layers"


def layer_order() -> list[str]:
    """The layer order as docs/architecture.md writes it, lowest first: the first fenced block under its
    "Package layers" heading, dotted package names joined by `<`."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert LAYERS_HEADING in text, f"docs/architecture.md has no {LAYERS_HEADING!r} section"
    block = re.search(r"^```\n(.*?)^```", text.split(LAYERS_HEADING, 1)[1], re.S | re.M)
    assert block, f"docs/architecture.md: no fenced block under {LAYERS_HEADING!r}"
    names = [name.strip() for name in block.group(1).split("<")]
    bad = [name for name in names if not re.fullmatch(r"[a-z_]+(\.[a-z_]+)*", name)]
    assert not bad, f"docs/architecture.md: not a dotted package name in the layer order: {bad}"
    return names


def layer_of(module: str, layers: list[str]) -> str:
    """The layer a module belongs to: the longest layer name that is the module or a package above it."""
    return max((name for name in layers if module == name or module.startswith(name + ".")), key=len)


def upward_imports(graph: dict[str, set[str]], layers: list[str]) -> list[str]:
    """Every import of a module in a higher layer than the importer's, as `importer (layer) -> imported (layer)`."""
    rank = {name: i for i, name in enumerate(layers)}
    found = []
    for module, deps in sorted(graph.items()):
        here = layer_of(module, layers)
        for dep in sorted(deps):
            there = layer_of(dep, layers)
            if rank[there] > rank[here]:
                found.append(f"{module} ({here}) -> {dep} ({there})")
    return found


def layer_graph(graph: dict[str, set[str]], layers: list[str]) -> dict[str, set[str]]:
    """The module graph folded into layers: an edge per pair of layers that one import joins."""
    folded: dict[str, set[str]] = {name: set() for name in layers}
    for module, deps in graph.items():
        here = layer_of(module, layers)
        folded[here] |= {layer_of(dep, layers) for dep in deps} - {here}
    return folded


def _whole_graph() -> dict[str, set[str]]:
    """Every module of engine/ and kvtui/ and the modules of either package it imports."""
    paths = {_module_name(p): p for package in ("engine", "kvtui") for p in (ROOT / package).rglob("*.py")}
    return {
        name: {d for d in _imports(path, "engine") | _imports(path, "kvtui") if d in paths and d != name}
        for name, path in paths.items()
    }


def test_every_package_has_a_place_in_the_layer_order():
    """Both roots and every subpackage of them are named in the order, and every name there is a package or a
    module: a new package is placed on purpose, and the page names nothing that is gone."""
    layers = layer_order()
    packages = {"engine", "kvtui"} | {
        ".".join(init.parent.relative_to(ROOT).parts)
        for root in ("engine", "kvtui")
        for init in (ROOT / root).glob("*/__init__.py")
    }
    modules = set(_whole_graph())
    assert not packages - set(layers), (
        f"place these packages in docs/architecture.md's order: {packages - set(layers)}"
    )
    assert not set(layers) - modules, f"the layer order names what does not exist: {set(layers) - modules}"
    assert len(layers) == len(set(layers)), f"a package twice in the layer order: {layers}"


def test_packages_import_only_packages_below_them():
    """Each module imports only modules of its own layer or of a layer below it, at load time, inside a
    function or under TYPE_CHECKING alike (the order: docs/architecture.md, Package layers)."""
    upward = upward_imports(_whole_graph(), layer_order())
    assert not upward, (
        "imports against the layer order (move the code down, or the import up):\n" + "\n".join(upward)
    )


def test_no_circle_between_packages():
    """A circle between packages (state -> sources -> state) breaks any order; the file-level circle test above
    cannot see one made of different files."""
    circle = _cycle(layer_graph(_whole_graph(), layer_order()))
    assert circle is None, " -> ".join(circle)


def test_the_layer_rule_finds_an_upward_import_and_a_circle():
    layers = ["a", "a.low", "b", "b.high"]
    assert layer_of("a.low.x", layers) == "a.low" and layer_of("a.other", layers) == "a"
    assert upward_imports({"b.high.x": {"a.low.y", "b.z"}, "a.low.x": {"a.y"}}, layers) == []
    assert upward_imports({"a.low.y": {"b.high.x"}}, layers) == ["a.low.y (a.low) -> b.high.x (b.high)"]
    folded = layer_graph({"a.x": {"b.y"}, "b.y": {"a.z"}, "a.z": set()}, layers)
    assert _cycle(folded) == ["a", "b", "a"]

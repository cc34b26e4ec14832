"""House rules that keep the code readable: no import circles, no source file too long to read in one sitting."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, package: str) -> set[str]:
    """Modules of `package` that `path` imports, at load time or inside a function (a deferred import is still a
    dependency); `if TYPE_CHECKING:` blocks do not count."""
    tree = ast.parse(path.read_text())
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
               and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
               for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] == package}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 visiting, 2 done

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
    return {name: {d for d in _imports(path, package) if d in modules and d != name}
            for name, path in modules.items()}


@pytest.mark.parametrize("package", ["engine", "kvtui"])
def test_no_import_circles(package):
    assert _cycle(_graph(package)) is None, " -> ".join(_cycle(_graph(package)))


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_source_file_is_too_long_to_read_in_one_sitting():
    long = {str(p.relative_to(ROOT)): n for package in ("engine", "kvtui") for p in (ROOT / package).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by concept (over {MAX_LINES} lines): {long}"

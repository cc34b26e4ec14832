"""The user docs hold together: every relative link and image in README.md and docs/*.md names a file that
exists (and a heading there, for an anchor), the README stays short, and docs/trace-format.md is what its
generator makes from the schema table now."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and ![alt](target); a target ends at whitespace or the closing parenthesis
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# <img src="..."> in raw HTML
IMG = re.compile(r"<img[^>]*\ssrc=\"([^\"]+)\"")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def targets(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    # inline code may show link syntax as an example
    text = re.sub(r"`[^`\n]*`", "", text)
    return LINK.findall(text) + IMG.findall(text)


def test_pages_exist():
    names = {page.name for page in PAGES}
    for name in (
        "concepts.md",
        "ui.md",
        "attach-and-proxy.md",
        "whatif.md",
        "trace-format.md",
        "api.md",
        "exactness.md",
        "performance.md",
        "architecture.md",
    ):
        assert name in names, f"docs/{name} is missing"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in targets(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            # http:, https:, mailto: ...: not checked here
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(
                f"{target}: no such file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}"
            )
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not broken, f"{page.relative_to(ROOT)}: broken links:\n" + "\n".join(broken)


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 200, f"README.md has {lines} lines; keep it at most 200 and move the rest into docs/"


def test_readme_keeps_the_fresh_machine_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "./install.sh && .venv/bin/kvtui" in readme
    assert "./install.sh --test && .venv/bin/python -m pytest -q" in readme


def test_trace_format_page_is_current():
    from kvtui.docs_tool.trace_format import markdown

    page = (ROOT / "docs" / "trace-format.md").read_text(encoding="utf-8")
    assert page == markdown(), (
        "docs/trace-format.md differs from the schema table: run "
        "`python -m kvtui.docs_tool.trace_format docs/trace-format.md`"
    )


def test_trace_format_page_documents_every_event_type():
    from engine.trace.schema import EVENT_FIELDS

    page = (ROOT / "docs" / "trace-format.md").read_text(encoding="utf-8")
    missing = [etype for etype in EVENT_FIELDS if f"**`{etype}`**" not in page]
    assert not missing, f"docs/trace-format.md lacks {missing}"


def test_every_screenshot_is_committed():
    from kvtui.docs_tool.screenshots import SHOTS

    missing = [shot.name for shot in SHOTS if not (ROOT / "docs" / "img" / f"{shot.name}.svg").exists()]
    assert not missing, f"run `python -m kvtui.docs_tool.screenshots docs/img` ({', '.join(missing)} missing)"


# --- docs/architecture.md's map of the code ----------------------------------------------------------------
MAP_HEADING = "## Every module"
SOURCE_SUFFIXES = (".py", ".c", ".h")
# a package from the repository root, `engine/worker/kernels/`, then its role
FOLDER_LINE = re.compile(r"^((?:engine|kvtui)(?:/\w+)*/)\s+(\S.*)$")
# a file of the folder above, indented, then its role
FILE_LINE = re.compile(r"^\s+(\w+\.(?:py|c|h))\s+(\S.*)$")


def module_map(text: str) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """The map's folders and files (path from the root -> role), and its lines that are neither: the first
    fenced block under "Every module". A package's role is its folder line's, so its __init__.py is not listed."""
    assert MAP_HEADING in text, f"docs/architecture.md has no {MAP_HEADING!r} section"
    block = re.search(r"^```\n(.*?)^```", text.split(MAP_HEADING, 1)[1], re.S | re.M)
    assert block, f"docs/architecture.md: no fenced block under {MAP_HEADING!r}"
    folders: dict[str, str] = {}
    files: dict[str, str] = {}
    odd: list[str] = []
    folder = None
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        if found := FOLDER_LINE.match(line):
            folder = found.group(1)
            folders[folder] = found.group(2)
        elif (found := FILE_LINE.match(line)) and folder is not None:
            files[folder + found.group(1)] = found.group(2)
        else:
            odd.append(line)
    return folders, files, odd


def _code_files() -> tuple[set[str], set[str]]:
    """The packages (as `engine/core/`) and the source files (.py, .c, .h; not __init__.py) of engine/ and kvtui/."""
    paths = [
        p
        for root in ("engine", "kvtui")
        for p in (ROOT / root).rglob("*")
        if p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts
    ]
    packages = {f"{p.parent.relative_to(ROOT).as_posix()}/" for p in paths if p.name == "__init__.py"}
    files = {p.relative_to(ROOT).as_posix() for p in paths if p.name != "__init__.py"}
    return packages, files


def test_the_map_reader_reads_folders_files_and_odd_lines():
    text = f"{MAP_HEADING}\n\n```\nengine/core/   bookkeeping\n  blocks.py    the pool\nblocks.py\n```\n"
    assert module_map(text) == (
        {"engine/core/": "bookkeeping"},
        {"engine/core/blocks.py": "the pool"},
        ["blocks.py"],
    )


def test_architecture_names_every_module_with_its_role():
    """docs/architecture.md names every package and every source file of engine/ and kvtui/, one line each with
    its role, and names nothing that does not exist."""
    folders, files, odd = module_map((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    packages, sources = _code_files()
    assert not odd, (
        "docs/architecture.md's map: lines that are neither a folder nor a file with its role:\n"
        + "\n".join(odd)
    )
    assert not packages - set(folders), (
        f"docs/architecture.md's map lacks these packages: {sorted(packages - set(folders))}"
    )
    assert not sources - set(files), (
        f"docs/architecture.md's map lacks these modules: {sorted(sources - set(files))}"
    )
    gone = sorted((set(folders) - packages) | (set(files) - sources))
    assert not gone, f"docs/architecture.md's map names what does not exist: {gone}"


# a source file of ours named from the repository root, not inside a longer path (tests/kvtui/...)
MODULE_PATH = re.compile(r"(?<![\w/.-])((?:engine|kvtui)/[\w/]*\w\.(?:py|c|h))\b")


def test_no_page_or_comment_names_a_module_that_is_gone():
    """Every `engine/...` or `kvtui/...` source path that the README, docs/, the code or the tests name exists: a
    module moved or deleted leaves no pointer to it behind."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))] + [
        p
        for folder in ("engine", "kvtui", "tests")
        for p in sorted((ROOT / folder).rglob("*"))
        if p.suffix in (*SOURCE_SUFFIXES, ".sh") and "__pycache__" not in p.parts
    ]
    gone = [
        f"{path.relative_to(ROOT)}:{n}: {name}"
        for path in texts
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for name in MODULE_PATH.findall(line)
        if not (ROOT / name).exists()
    ]
    assert not gone, "these name a module that does not exist:\n" + "\n".join(gone)

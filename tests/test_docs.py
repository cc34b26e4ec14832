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
    from kvtui.export.trace_format import markdown

    page = (ROOT / "docs" / "trace-format.md").read_text(encoding="utf-8")
    assert page == markdown(), (
        "docs/trace-format.md differs from the schema table: run "
        "`python -m kvtui.export.trace_format docs/trace-format.md`"
    )


def test_trace_format_page_documents_every_event_type():
    from engine.trace.schema import EVENT_FIELDS

    page = (ROOT / "docs" / "trace-format.md").read_text(encoding="utf-8")
    missing = [etype for etype in EVENT_FIELDS if f"**`{etype}`**" not in page]
    assert not missing, f"docs/trace-format.md lacks {missing}"


def test_every_screenshot_is_committed():
    from kvtui.export.screenshots import SHOTS

    missing = [shot.name for shot in SHOTS if not (ROOT / "docs" / "img" / f"{shot.name}.svg").exists()]
    assert not missing, f"run `python -m kvtui.export.screenshots docs/img` ({', '.join(missing)} missing)"

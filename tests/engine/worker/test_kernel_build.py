"""engine/worker/kernels/build.py: a C kernel is compiled once per machine into the kvtui cache and loaded; no
compiler, a source that does not compile, or KVTUI_NO_KERNELS=1 give None and a reason (the torch path runs)."""

from __future__ import annotations

import pytest

from engine.worker.kernels import build

pytestmark = pytest.mark.skipif(build._compiler() is None, reason="no C compiler on PATH")

GOOD = "int answer(int x) { return x + 41; }\n"


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache and source folder, nothing loaded yet."""
    monkeypatch.setenv("KVTUI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KVTUI_NO_KERNELS", raising=False)
    monkeypatch.setattr(build, "FOLDER", tmp_path)
    monkeypatch.setattr(build, "_loaded", {})
    monkeypatch.setattr(build, "why_not", {})
    return tmp_path


def test_a_kernel_is_built_once_into_the_cache_and_loaded(fresh):
    (fresh / "answer.c").write_text(GOOD)
    assert build.load("answer").answer(1) == 42
    (built,) = (fresh / "cache" / "kernels").glob("answer-*.so")
    stamp = built.stat().st_mtime_ns
    # another process: loads the cached file, builds nothing
    build._loaded.clear()
    assert build.load("answer").answer(2) == 43
    assert built.stat().st_mtime_ns == stamp
    # a changed source is another file
    (fresh / "answer.c").write_text(GOOD.replace("41", "1"))
    build._loaded.clear()
    assert build.load("answer").answer(1) == 2
    assert len(list((fresh / "cache" / "kernels").glob("answer-*.so"))) == 2


def test_a_changed_header_is_another_build(fresh):
    (fresh / "answer.c").write_text('#include "base.h"\nint answer(int x) { return x + BASE; }\n')
    (fresh / "base.h").write_text("#define BASE 41\n")
    assert build.load("answer").answer(1) == 42
    (fresh / "base.h").write_text("#define BASE 1\n")
    build._loaded.clear()
    assert build.load("answer").answer(1) == 2


def test_kvtui_march_builds_for_another_isa(fresh, monkeypatch):
    (fresh / "answer.c").write_text(GOOD)
    monkeypatch.setenv("KVTUI_MARCH", "x86-64-v3")
    if build._targets() != (["-march=x86-64-v3"],):
        pytest.fail(f"KVTUI_MARCH gave {build._targets()}")
    assert build.target() == "x86-64-v3"
    library = build.load("answer")
    if library is None:
        # a compiler for another architecture refuses the name, and says so
        assert "x86-64-v3" in build.why_not["answer"]
    else:
        assert library.answer(1) == 42
    build._loaded.clear()
    monkeypatch.setenv("KVTUI_MARCH", "no-such-isa")
    assert build.load("answer") is None and "no-such-isa" in build.why_not["answer"]


def test_a_source_that_does_not_compile_says_why(fresh):
    (fresh / "broken.c").write_text("int broken(void) { return undeclared_name; }\n")
    assert build.load("broken") is None
    # the compiler's error line itself, not a trailing note
    assert "could not build broken.c" in build.why_not["broken"]
    assert "undeclared_name" in build.why_not["broken"]


def test_a_compiler_given_with_arguments(fresh, monkeypatch):
    (fresh / "answer.c").write_text(GOOD)
    monkeypatch.setenv("CC", f"{build._compiler()[0]} -DUNUSED=1")
    assert build.load("answer").answer(1) == 42


def test_no_compiler_or_kernels_turned_off_give_the_torch_path(fresh, monkeypatch):
    (fresh / "answer.c").write_text(GOOD)
    monkeypatch.setenv("CC", str(fresh / "no-such-cc"))
    assert build.load("answer") is None
    assert "no-such-cc" in build.why_not["answer"]
    build._loaded.clear()
    monkeypatch.delenv("CC")
    monkeypatch.setenv("KVTUI_NO_KERNELS", "1")
    assert build.load("answer") is None
    assert build.why_not["answer"] == "KVTUI_NO_KERNELS=1"


def test_the_kernels_sources_ship_beside_the_loader():
    for name in ("paged_decode", "panel_linear"):
        assert (build.FOLDER / f"{name}.c").exists()

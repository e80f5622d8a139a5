"""The gateway's allocator choice (conduit/runtime/allocator.py): which environment `conduit serve gateway` re-executes with."""

from __future__ import annotations

import pytest

from conduit.runtime import allocator


@pytest.fixture
def lib(tmp_path):
    path = tmp_path / "libjemalloc.so.2"
    path.write_bytes(b"")
    return (str(path),)


def test_auto_preloads_jemalloc_under_pythonmalloc_malloc(lib):
    env = allocator.reexec_env("auto", {"LD_PRELOAD": "/opt/other.so"}, lib)
    assert env["LD_PRELOAD"] == f"{lib[0]} /opt/other.so"  # the user's own preload is kept
    assert env["PYTHONMALLOC"] == "malloc" and env["MALLOC_CONF"] == allocator.MALLOC_CONF
    assert allocator.in_use({**env}) == "jemalloc"


def test_user_malloc_conf_wins(lib):
    assert allocator.reexec_env("auto", {"MALLOC_CONF": "narenas:1"}, lib)["MALLOC_CONF"] == "narenas:1"


def test_nothing_changes_when_applied_or_not_wanted(lib):
    applied = allocator.reexec_env("auto", {}, lib)
    assert allocator.reexec_env("auto", applied, lib) is None  # the re-executed process does not loop
    assert allocator.reexec_env("pymalloc", {}, lib) is None
    assert allocator.in_use({}) == "pymalloc"


def test_missing_library_falls_back_or_fails_clearly(tmp_path):
    missing = (str(tmp_path / "nope.so"),)
    assert allocator.reexec_env("auto", {}, missing) is None
    with pytest.raises(allocator.AllocatorError, match="libjemalloc2"):
        allocator.reexec_env("jemalloc", {}, missing)
    with pytest.raises(ValueError):
        allocator.reexec_env("tcmalloc", {}, missing)

"""Unit-test session hooks (the shared fixtures are in tests/conftest.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from purity import watch


gc.disable()  # while the test modules are imported: ~1,300 collections of what imports make, ~1.3 s a run here


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what the collection leaves (modules, classes, schemas: ~240 k objects) out of the garbage collector
    and turn it back on: each full collection during the run, and the ones pytest runs at its end to find
    unraisable exceptions, then scan only what the tests make (docs/benchmarks.md, "Unit tests"). The little
    garbage the imports left stays (~5 MB; a full collection first would cost ~0.15 s)."""
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)  # the tests make little cyclic garbage: ~180 collections instead of ~1,100
    gc.enable()


@pytest.fixture(autouse=True)
def transitions_leave_their_input() -> Iterator[None]:
    """Rule A34 in every scenario the unit tests drive: a transition the interpreter applies that changes
    the state it was given fails the test (``purity.watch``)."""
    with watch():
        yield

"""lifecycle.settle_heap: cyclic garbage is collected first, survivors leave the collector's generations."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from services.shared import lifecycle


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_settle_heap_collects_cycles_then_freezes_the_survivors() -> None:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    dead = weakref.ref(a)
    del a, b
    kept = [_Node() for _ in range(100)]
    lifecycle.settle_heap()
    assert dead() is None, "a cycle unreachable before settling must be collected, not frozen"
    assert gc.get_freeze_count() >= len(kept)
    in_generations = {id(o) for o in gc.get_objects()}
    assert not any(id(o) in in_generations for o in kept), "survivors must leave the generations"
    fresh = _Node()
    assert id(fresh) in {id(o) for o in gc.get_objects()}, "objects made afterwards are collected as usual"

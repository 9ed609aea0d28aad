"""lifecycle.HeapKeeper: settle collects cyclic garbage first and freezes the survivors; tend
freezes what a full collection left, and settles again once the frozen heap has grown."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from services.shared import lifecycle


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    """A two-node cycle nothing else refers to once this returns; a weak reference to one node."""
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def _in_generations(objects: list[_Node]) -> bool:
    ids = {id(o) for o in gc.get_objects()}
    return any(id(o) in ids for o in objects)


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_settle_collects_cycles_then_freezes_the_survivors() -> None:
    dead = _cycle()
    kept = [_Node() for _ in range(100)]
    keeper = lifecycle.HeapKeeper()
    keeper.settle()
    assert dead() is None, "a cycle unreachable before settling must be collected, not frozen"
    assert keeper.settled == gc.get_freeze_count() >= len(kept)
    assert not _in_generations(kept), "survivors must leave the generations"
    assert _in_generations([_Node()]), "objects made afterwards are collected as usual"


def test_tend_freezes_only_after_a_full_collection() -> None:
    keeper = lifecycle.HeapKeeper()
    keeper.settle()
    later = [_Node() for _ in range(100)]
    assert keeper.tend() is False, "no full collection ran since the settle: nothing to do"
    assert _in_generations(later)
    gc.collect(1)  # a young collection is not a full one
    assert keeper.tend() is False
    gc.collect()
    assert keeper.tend() is True
    assert not _in_generations(later), "what the full collection left is frozen"
    assert keeper.settles == 1 and keeper.refrozen >= len(later)
    assert keeper.tend() is False, "once per full collection"


def test_frozen_garbage_is_collected_once_the_heap_has_grown() -> None:
    keeper = lifecycle.HeapKeeper(growth=100.0)  # far from grown: garbage frozen by tend stays
    keeper.settle()
    holder = [_Node()]
    holder[0].other = _Node()
    holder[0].other.other = holder[0]
    dead = weakref.ref(holder[0])
    gc.collect()
    keeper.tend()  # the cycle is live here: frozen
    holder.clear()
    gc.collect()
    keeper.tend()
    assert dead() is not None, "a cycle that dies frozen outlives full collections"
    keeper.growth = 1.0001  # now any growth counts
    grown = [_Node() for _ in range(max(100, keeper.settled // 1000))]
    gc.collect()
    assert keeper.tend() is True
    assert keeper.settles == 2, "the frozen heap grew past growth x its settled size: settled again"
    assert dead() is None, "settling again collects the garbage frozen since"
    assert not _in_generations(grown)


def test_growth_must_exceed_one() -> None:
    with pytest.raises(ValueError, match="growth must be above 1, got 1"):
        lifecycle.HeapKeeper(growth=1)

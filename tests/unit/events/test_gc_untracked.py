"""Messages and value types are immutable trees (``gc=False``): the cyclic GC never traverses them.

A live allocator holds every live allocation's spec, charges and the recent events; leaving them to
the cyclic GC made each full collection walk ~300,000 extra objects (a 192 ms pause measured in
benchmarks/bench_log.py's steady state). This checks every Struct of the contract opts out.
"""

from __future__ import annotations

import gc
import inspect
from datetime import UTC, datetime

import msgspec
import pytest

from events import base, decisions, intents, values
from events.values import AllocationSpec, Resources
from services.allocator import ports

MODULES = (base, decisions, intents, values, ports)


def _structs() -> list[type[msgspec.Struct]]:
    found = {obj for module in MODULES for _, obj in inspect.getmembers(module, inspect.isclass)
             if issubclass(obj, msgspec.Struct) and obj.__module__ == module.__name__}
    return sorted(found, key=lambda t: t.__qualname__)


@pytest.mark.parametrize("struct", _structs(), ids=lambda t: t.__qualname__)
def test_every_contract_struct_is_frozen_and_untracked(struct: type[msgspec.Struct]) -> None:
    config = struct.__struct_config__
    assert config.frozen, f"{struct.__qualname__} must be frozen (gc=False is only safe without mutation)"
    assert not config.gc, f"{struct.__qualname__} must set gc=False"


def test_a_decided_grant_is_not_tracked_by_the_cyclic_gc() -> None:
    request = Resources(milli_tflops=1_000, vram_bytes=1 << 30)
    spec = AllocationSpec(allocation_id="a", namespace="ns", pod="p", pool="default", request=request, limit=request)
    grant = decisions.AllocationGranted(at=datetime(2026, 3, 1, tzinfo=UTC), spec=spec, node="n", gpus=("g",),
                                        charges=(request,))
    decided = ports.DecidedIntent(intent_id="i", stream_seq=1, events=(grant,))
    assert [gc.is_tracked(x) for x in (spec, grant, decided)] == [False, False, False]

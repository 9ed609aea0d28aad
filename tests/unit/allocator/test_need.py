"""The request shape guard: a Need (all that filters and strategies see of a request) reads only
the AllocationSpec fields in ``need.SHAPE_FIELDS``, so memos and caches keyed by ``shape_key``
can never serve a request whose placement differs."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from events.values import AllocationSpec, PoolConfig, Resources
from services.allocator.domain import profile
from services.allocator.domain.framework import Context
from services.allocator.domain.model import GpuState, NodeState
from services.allocator.domain.need import GPU_BLIND_FIELDS, NODE_ONLY_FIELDS, SHAPE_FIELDS, Need, shape_key
from services.allocator.domain.strategies.base import ScanStrategy
from tests.unit.allocator.builders import a_gpu, a_request


class _Recorder:
    """Wraps a spec and records which of its fields are read."""

    def __init__(self, spec: AllocationSpec) -> None:
        self.spec, self.read = spec, set[str]()

    def __getattr__(self, name: str) -> Any:
        self.read.add(name)
        return getattr(self.spec, name)


def _attributes(need: Need) -> dict[str, object]:
    return {name: getattr(need, name) for name in Need.__slots__}


def test_need_reads_only_shape_fields() -> None:
    recorder = _Recorder(a_request("u", 10, 2**30, count=2, pool="p", gpu_models=("A100",), vendor="NVIDIA"))
    Need(recorder)  # type: ignore[arg-type]
    assert recorder.read, "the recorder saw nothing: the test no longer looks"
    assert recorder.read <= set(SHAPE_FIELDS), f"Need reads {recorder.read - set(SHAPE_FIELDS)} outside shape_key"


def test_every_spec_field_is_placed_or_declared_irrelevant() -> None:
    irrelevant = {"allocation_id", "namespace", "pod", "limit", "workload", "qos", "partition_template", "attributes",
                  "priority", "gang"}
    assert set(AllocationSpec.__struct_fields__) == set(SHAPE_FIELDS) | irrelevant


@given(uid=st.text(min_size=1, max_size=5), ns=st.text(max_size=5), qos=st.sampled_from(["low", "high"]),
       limit=st.integers(0, 10**6), workload=st.text(max_size=4))
def test_fields_outside_the_shape_change_neither_key_nor_need(uid: str, ns: str, qos: str, limit: int,
                                                              workload: str) -> None:
    base = a_request("base", 10, 2**30, pool="p")
    other = msgspec.structs.replace(base, allocation_id=uid, namespace=ns, qos=qos, workload=workload,
                                    limit=Resources(milli_tflops=limit), attributes={"k": uid})
    assert shape_key(other) == shape_key(base)
    assert _attributes(Need(other)) == _attributes(Need(base))


class _NeedRecorder:
    """Wraps a Need and records which of its attributes are read."""

    def __init__(self, need: Need) -> None:
        self.need, self.read = need, set[str]()

    def __getattr__(self, name: str) -> Any:
        self.read.add(name)
        return getattr(self.need, name)


def test_gpu_filters_and_scan_ranks_never_read_node_only_fields() -> None:
    node_only = {"memory_bytes": "memory_bytes", "node_affinity": "affinity"}
    assert set(node_only) == set(NODE_ONLY_FIELDS)
    gpu = GpuState(spec=a_gpu("g0", 100, 40 * 2**30, index=0), node="n", pool="p", phase="Running")
    node = NodeState(name="n", pool="p", gpus=["g0"], cpu_milli=64_000, memory_bytes=2**40)
    read: set[str] = set()
    gpu_read: set[str] = set()
    for spec in (a_request("u", 10, 2**30, pool="p", isolation="hard", gpu_models=("A100",), vendor="NVIDIA",
                           gpu_indices=(0,), cpu_milli=1000, memory_bytes=2**30),
                 a_request("v", percent=50, pool="p", count=2, isolation="shared"),
                 a_request("w", percent=100, pool="p", cpu_milli=4000)):
        for f in profile.GPU_FILTERS:
            recorder = _NeedRecorder(Need(spec))
            if f.enabled(recorder):  # type: ignore[arg-type]
                f.filter(gpu, recorder, Context(PoolConfig()))  # type: ignore[arg-type]
            read |= recorder.read
            gpu_read |= recorder.read
        for cls in profile.STRATEGY_CLASSES:
            strategy = cls()
            if isinstance(strategy, ScanStrategy):
                recorder = _NeedRecorder(Need(spec))
                strategy.rank(node, [gpu], [gpu], recorder, PoolConfig(), "u")  # type: ignore[arg-type]
                strategy.pick(node, [gpu], [gpu], recorder, PoolConfig(), "u")  # type: ignore[arg-type]
                read |= recorder.read
    assert read, "nothing was read: the test no longer looks"
    assert not read & set(node_only.values()), f"node-only fields read: {read & set(node_only.values())}"
    gpu_blind = {**node_only, "cpu_milli": "cpu_milli"}
    assert set(gpu_blind) == set(GPU_BLIND_FIELDS)
    assert gpu_read, "no GPU filter read anything: the test no longer looks"
    assert not gpu_read & set(gpu_blind.values()), f"GPU filters read {gpu_read & set(gpu_blind.values())}"

"""Placement strategies: TensorFusion's node and GPU scores, S36-S39 (inventory MG, weights 0.5/0.5)."""

from __future__ import annotations

import pytest

from events import decisions as ev
from events.values import NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, PoolConfig
from services.allocator.domain.model import GpuState
from services.allocator.domain.strategies.tensorfusion import available_score, used_score
from services.allocator.domain.units import normalize, round_half_away, tflops_on
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request, res, tf

HALF = PoolConfig(vram_weight=0.5, tflops_weight=0.5)
MG = {  # name: (node, cap TF, cap Gi, avail TF, avail Gi)
    "gpu-1-1": ("node-1", 20, 80, 10, 40), "gpu-1-2": ("node-1", 20, 80, 12, 42), "gpu-1-3": ("node-1", 20, 80, 14, 44),
    "gpu-2-1": ("node-2", 25, 100, 20, 80), "gpu-2-2": ("node-2", 25, 100, 18, 75),
    "gpu-3-1": ("node-3", 40, 120, 30, 100),
}


@pytest.mark.parametrize(
    ("name", "low_load", "compact"),
    [("gpu-1-1", 50, 50), ("gpu-1-2", 56, 44), ("gpu-1-3", 63, 38), ("gpu-2-1", 80, 20), ("gpu-2-2", 74, 27),
     ("gpu-3-1", 79, 21)],
)
def test_s36_s37_gpu_scores_round_half_away_from_zero(name: str, low_load: int, compact: int) -> None:
    _, cap_t, cap_v, av_t, av_v = MG[name]
    gpu = GpuState(spec=a_gpu(name, cap_t, cap_v * Gi), node="n", pool="p", phase="Running",
                   used_milli_tflops=tf(cap_t - av_t), used_vram_bytes=(cap_v - av_v) * Gi)
    assert available_score(gpu, HALF) == low_load
    assert used_score(gpu, HALF) == compact


def test_round_half_away_differs_from_python_round() -> None:
    assert [round_half_away(x) for x in (62.5, 43.75, -0.5, 0.49, 2.5)] == [63, 44, -1, 0, 3]
    assert normalize(200, 200, vram_weight=0.5, tflops_weight=0.5) == 100


def test_percent_conversion_is_exact_and_rounds_up() -> None:
    assert tflops_on(res(percent=10), tf(19.5)) == 1950  # TensorFusion truncates this to 1 TFLOPS
    assert tflops_on(res(percent=33), 312_001) == 102_961  # ceil(102 960.33)


def indexed_cluster(placement: str) -> Cluster:
    """Three nodes whose fill levels differ: node-a 50 % used, node-b 10 %, node-c idle (2 GPUs each)."""
    c = Cluster()
    c.pool("p", placement=placement, vram_weight=0.5, tflops_weight=0.5)
    for node in ("node-a", "node-b", "node-c"):
        c.node(node, "p", a_gpu(f"{node}-0", 100, 100 * Gi, index=0), a_gpu(f"{node}-1", 100, 100 * Gi, index=1),
               labels={"kubernetes.io/hostname": node})
    c.request(a_request("fill-a", 100, 100 * Gi, pool="p", node_affinity=_on("node-a"), gpu_indices=(0,)))
    c.request(a_request("fill-b", 20, 20 * Gi, pool="p", node_affinity=_on("node-b"), gpu_indices=(0,)))
    return c


def _on(node: str) -> NodeAffinity:
    req = NodeSelectorRequirement(key="kubernetes.io/hostname", operator="In", values=(node,))
    return NodeAffinity(required=(NodeSelectorTerm(match_expressions=(req,)),))


@pytest.mark.parametrize(
    ("placement", "node", "gpu"),
    [
        ("compact-first", "node-a", "node-a-1"),            # fullest node; only its free GPU fits
        ("node-compact-gpu-low-load", "node-a", "node-a-1"),
        ("low-load-first", "node-c", "node-c-0"),           # emptiest node, ties by GPU name
    ],
)
def test_strategies_rank_nodes_by_mean_score(placement: str, node: str, gpu: str) -> None:
    c = indexed_cluster(placement)
    out = c.request(a_request("x", 10, 10 * Gi, pool="p"))
    assert isinstance(out, ev.AllocationGranted) and (out.node, out.gpus) == (node, (gpu,))


@pytest.mark.parametrize(("placement", "gpus"), [("compact-first", ("node-b-0",)), ("low-load-first", ("node-b-1",)),
                                                 ("node-compact-gpu-low-load", ("node-b-1",))])
def test_gpu_choice_within_the_node(placement: str, gpus: tuple[str, ...]) -> None:
    c = indexed_cluster(placement)
    out = c.request(a_request("x", 10, 10 * Gi, pool="p", node_affinity=_on("node-b")))
    assert isinstance(out, ev.AllocationGranted) and out.gpus == gpus


@pytest.mark.parametrize("placement", ["node-compact-gpu-low-load", "compact-first", "low-load-first", "best-fit",
                                       "frag-cpu", "fgd"])
@pytest.mark.parametrize("indexed", [True, False])
@pytest.mark.parametrize("reference", [False, True])
def test_equal_gpus_tie_by_index_not_by_name_as_a_string(placement: str, indexed: bool, reference: bool) -> None:
    """Issue 28 item 14: 12 idle GPUs, a 3-GPU request takes gpu-0, gpu-1, gpu-2 (string order gave
    gpu-10 third), with or without a reported index, in the Scheduler and the ReferenceScheduler."""
    from services.allocator.domain.reference import ReferenceScheduler

    c = Cluster(ReferenceScheduler() if reference else None)
    c.pool("p", placement=placement)
    c.node("n1", "p", *[a_gpu(f"gpu-{i}", 100, 80 * Gi, index=i if indexed else None) for i in range(12)])
    out = c.request(a_request("a", 10, Gi, pool="p", count=3))
    assert isinstance(out, ev.AllocationGranted) and sorted(out.gpus) == ["gpu-0", "gpu-1", "gpu-2"], out

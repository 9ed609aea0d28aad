"""Trial: one node as it would be without a set of allocations (a preemption's dry run).

The node and the GPUs the victims hold are copied with the victims' recorded charges, CPU,
memory and worker slots taken off (exactly what ``evolve`` would give back), and the request is
put through the very filter chain (node, GPU and set filters), the topology-aware strategy pick
and the quota check of a normal placement on that copy; the state itself is never touched. The
Dynamic isolation lock of a GPU is read from the allocations that stay on it.
Fixes TensorFusion's dry run (FilterWithPreempt), which added requests back without clamping,
ignored pool, affinity and max-workers filters, and
subtracted victims of other namespaces from the preemptor's quota usage: here only victims of the
preemptor's own namespace free its namespace-total quota, and they free their worker slot too.
``bound`` is a cheap arithmetic test run before the filters: False only when no copy could fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, cast

import msgspec

from events.values import AllocationSpec, Partition, Resources
from services.allocator.domain import partition
from services.allocator.domain.framework import Chain, Context
from services.allocator.domain.model import AllocationState, GpuState, NodeState, QuotaUsage
from services.allocator.domain.need import Need
from services.allocator.domain.placement import Grant, exact_quota, usage_on
from services.allocator.domain.quota import subtract
from services.allocator.domain.state import ClusterState
from services.allocator.domain.strategies.base import IndexedStrategy, ScanStrategy, Strategy
from services.allocator.domain.topology import pick_indexed, pick_scan
from services.allocator.domain.victims import freed_by
from services.partitions.templates import TemplateTable, shipped

TEMPLATES = shipped()


class Fit(NamedTuple):
    """Where the request lands on the trial node: GPUs in pick order and its quota usage; for a
    partitioned request also the template-sized charges and the partitions (domain/partition.py)."""

    gpus: list[GpuState]
    usage: QuotaUsage
    charges: tuple[Resources, ...] = ()
    partitions: tuple[Partition, ...] = ()


def short_of_cpu(need: Need, node: NodeState, freed: int) -> bool:
    """Whether ``node`` lacks the request's CPU even with ``freed`` millicores given back
    (NodeResourcesFilter: checked only when the node reports CPU and the request asks some)."""
    return bool(need.cpu_milli and node.cpu_milli and node.cpu_milli - node.used_cpu_milli + freed < need.cpu_milli)


class Trial:
    """The dry run of ``spec`` on one node (``need``/``chain`` from the Scheduler's ``prepare``)."""

    __slots__ = ("chain", "ctx", "gpus", "indexed", "kept_deficits", "monotone", "need", "node", "quota",
                 "singles", "spec", "state", "strategy", "templates", "usage")

    def __init__(self, state: ClusterState, node: str, spec: AllocationSpec, need: Need, chain: Chain,
                 strategy: Strategy, *, indexed: bool, templates: TemplateTable = TEMPLATES,
                 ctx: Context | None = None) -> None:
        self.state = state
        self.node = state.nodes[node]
        self.gpus = {name: state.gpus[name] for name in self.node.gpus}
        self.spec, self.need, self.chain, self.strategy, self.indexed = spec, need, chain, strategy, indexed
        self.ctx = ctx or Context(state.pool_config(spec.pool), allocations=state.allocations)
        self.kept_deficits: list[tuple[str, int, int, int]] = []
        """:meth:`deficits` once computed; a search shares the list kept with the node's result."""
        self.quota = state.quotas.get(spec.namespace)
        self.usage = state.usage.get(spec.namespace) or QuotaUsage()
        self.templates = templates
        self.monotone = self.quota is None and not need.partitioned
        """Whether taking more victims can only keep a fit: without a quota or partition templates,
        a dry run reads only free room (TFLOPS, VRAM, CPU, memory, worker slots, idleness, locks),
        which every further victim only adds to, and the pick never fails once the filters pass."""
        self.singles: dict[str, Fit | None] = {}

    def deficits(self) -> list[tuple[str, int, int, int]]:
        """Per GPU of the node (name, milli-TFLOPS and VRAM bytes the request lacks there, charges
        held): what victims must free on it. For a ``shared`` request (a whole idle GPU) the lack
        is every charge, given as (0, 0) here and checked by count."""
        found = self.kept_deficits
        if not found:
            need = self.need
            for name, gpu in self.gpus.items():
                cap = gpu.spec.capacity
                tflops = need.tflops_on(cap.milli_tflops) if need.percent else need.tflops
                found.append((name, tflops - (cap.milli_tflops - gpu.used_milli_tflops),
                              need.vram - (cap.vram_bytes - gpu.used_vram_bytes), len(gpu.charges)))
        return found

    def bound(self, victims: Sequence[AllocationState]) -> bool:
        """False when, even without ``victims``, too few GPUs have the free TFLOPS and VRAM (or
        idleness, for ``shared``) or the node lacks the CPU or memory (NodeResourcesFilter): no
        filter pass could succeed."""
        need, node = self.need, self.node
        if need.cpu_milli and node.cpu_milli and short_of_cpu(need, node, sum(v.spec.cpu_milli for v in victims)):
            return False
        if need.memory_bytes and node.memory_bytes and self.short_of_memory(sum(v.spec.memory_bytes for v in victims)):
            return False
        return self.enough(freed_by(victims))

    def short_of_memory(self, freed: int) -> bool:
        """Whether the node lacks the request's memory even with ``freed`` bytes given back
        (NodeResourcesFilter: checked only when the node reports memory and the request asks some)."""
        need, node = self.need, self.node
        return bool(need.memory_bytes and node.memory_bytes
                    and node.memory_bytes - node.used_memory_bytes + freed < need.memory_bytes)

    def frees(self, cpu: int, freed: dict[str, list[int]]) -> bool:
        """:meth:`bound` of a victim set given as what it gives back: ``cpu`` millicores and, per
        GPU, [milli-TFLOPS, VRAM bytes, charges] (``victims.CandidateSums``, summed once per node)."""
        return not short_of_cpu(self.need, self.node, cpu) and self.enough(freed)

    def enough(self, freed: dict[str, list[int]]) -> bool:
        """The GPU part of :meth:`frees`: whether, with ``freed`` given back per GPU
        ([milli-TFLOPS, VRAM bytes, charges]), at least the request's GPU count have its TFLOPS
        and VRAM free (for ``shared``: no charge left). Reads only the request's per-GPU amounts,
        GPU count and ``shared`` (:meth:`deficits`), not its CPU or memory."""
        need = self.need
        enough = 0
        none = (0, 0, 0)
        if need.shared:
            for name, _, _, held in self.deficits():
                enough += held == freed.get(name, none)[2]
        else:
            for name, tflops, vram, _ in self.deficits():
                back = freed.get(name, none)
                enough += back[0] >= tflops and back[1] >= vram
        return enough >= need.count

    def view(self, victims: Sequence[AllocationState]) -> tuple[NodeState, dict[str, GpuState]]:
        """Copies of the node and its GPUs without ``victims`` (untouched GPUs are shared, read-only)."""
        gone = {v.spec.allocation_id for v in victims}
        gpus = dict(self.gpus)
        for name, (tflops, vram, _) in freed_by(victims).items():
            gpu = gpus[name]
            gpus[name] = msgspec.structs.replace(
                gpu, used_milli_tflops=gpu.used_milli_tflops - tflops, used_vram_bytes=gpu.used_vram_bytes - vram,
                charges={k: c for k, c in gpu.charges.items() if k not in gone},
                partitions={k: p for k, p in gpu.partitions.items() if k not in gone})
        node = self.node
        node = msgspec.structs.replace(
            node, used_cpu_milli=node.used_cpu_milli - sum(v.spec.cpu_milli for v in victims),
            used_memory_bytes=node.used_memory_bytes - sum(v.spec.memory_bytes for v in victims),
            workers=[w for w in node.workers if w not in gone])
        return node, gpus

    def fits(self, victims: Sequence[AllocationState]) -> Fit | None:
        """The strategy's GPUs for the request on the node without ``victims``, when every filter
        and the quota pass there; None otherwise."""
        need, ctx, chain = self.need, self.ctx, self.chain
        node, gpus = self.view(victims)
        if not chain.node_admits(node, need, ctx):
            return None
        cands = chain.node_candidates(node, gpus, need, ctx)
        if not chain.fits(node, cands, need, ctx):
            return None
        if self.indexed:
            picked = pick_indexed(cast(IndexedStrategy, self.strategy), cands, need, ctx.config)
        else:
            members = [gpus[name] for name in node.gpus]
            picked = pick_scan(cast(ScanStrategy, self.strategy), node, members, cands, need, ctx.config,
                               self.spec.allocation_id)
        if need.partitioned:
            outcome = partition.grant(self.spec, node.name, picked, need, self.templates, self.quota,
                                      self._usage_without(victims))
            if not isinstance(outcome, Grant):
                return None
            return Fit(picked, outcome.usage, outcome.charges, outcome.partitions)
        add = usage_on(picked, self.spec)
        if self.quota is not None and exact_quota(self.quota, self.spec, picked, self._usage_without(victims),
                                                  add) is not None:
            return None
        return Fit(picked, add)

    def single(self, victim: AllocationState) -> Fit | None:
        """``fits((victim,))`` after ``bound``, kept per victim for this trial (the state does not
        change during a search)."""
        aid = victim.spec.allocation_id
        if aid in self.singles:
            return self.singles[aid]
        found = self.fits((victim,)) if self.bound((victim,)) else None
        self.singles[aid] = found
        return found

    def covered(self, victims: Sequence[AllocationState]) -> bool:
        """True when, by :attr:`monotone`, ``victims`` surely fit: one of them alone was found to fit."""
        if not self.monotone:
            return False
        singles = self.singles
        return any(singles.get(v.spec.allocation_id) is not None for v in victims)

    def _usage_without(self, victims: Sequence[AllocationState]) -> QuotaUsage:
        """The namespace's usage less its own victims' (only those free its quota)."""
        usage = self.usage
        for victim in victims:
            if victim.spec.namespace == self.spec.namespace and victim.usage is not None:
                usage = subtract(usage, victim.usage)
        return usage

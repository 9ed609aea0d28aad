"""The best victim set on one node for a request that fits nowhere, and the bounds that give a node
up before its dry runs (domain/preemption.py walks the pool's nodes and compares their plans).

kube-scheduler's DefaultPreemption per node (pkg/scheduler/framework/plugins/defaultpreemption,
selectVictimsOnNode), per GPU as TensorFusion's CheckQuotaAndFilterSingleNodePreempt: every
candidate goes and the request must fit (``Trial.bound`` first, then the dry run ``Trial.fits``);
the highest victim priority is minimised; kube-scheduler's reprieve keeps each candidate, most
important first, whenever the request still fits without it; and, up to :data:`EXACT_LIMIT`
candidates, an exhaustive search by subset size finds a better set. Plans compare by
:data:`Key`. Against the best plan of the search so far (``beat``) a node is given up when a lower
bound of its plan's key loses: the lowest candidate priority and per GPU the fewest candidates
that cover its deficit (:func:`lower_bound`), tightened by the CPU and memory the victims must
free and by how the needed GPUs are held (:func:`tightened_bound`), or when only a one-victim plan
could win and no single candidate makes room (:func:`no_single_wins`). Pure.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import NamedTuple

from events.values import Partition, Resources, priority_of
from services.allocator.domain.model import AllocationState
from services.allocator.domain.placement import charge_on
from services.allocator.domain.trial import Fit, Trial
from services.allocator.domain.victims import PRIORITY_OFFSET, CandidateSet, term

Key = tuple[int, int, int]
"""(highest victim priority, Σ (priority + 2³¹), victim count): lower is a better plan."""

EXACT_LIMIT = 12
"""Candidates (at or below the threshold priority) up to which a node's victim set is searched exhaustively."""

FIT_BUDGET = 512
"""Dry runs per node's exhaustive search (deterministic cap; the reprieve result stands beyond it)."""


class Plan(NamedTuple):
    """A preemption that makes the request fit: node, GPUs, charges, victims (lowest priority first,
    then allocation id), the plan's :data:`Key`, and partitions (aligned with ``gpus``) if partitioned."""

    node: str
    gpus: tuple[str, ...]
    charges: tuple[Resources, ...]
    victims: tuple[AllocationState, ...]
    key: Key
    partitions: tuple[Partition, ...] = ()


def key_of(victims: Sequence[AllocationState]) -> Key:
    """The :data:`Key` of a victim set."""
    return (max(priority_of(v.spec) for v in victims), sum(term(v) for v in victims), len(victims))


def loses(key: Key, beat: Key | None, tie_ok: bool) -> bool:
    """Whether a plan of ``key`` cannot replace the best so far (``beat``; ``tie_ok``: this node
    comes first in node order, so an equal key wins)."""
    return beat is not None and (key > beat if tie_ok else key >= beat)


def best_on_node(trial: Trial, found: CandidateSet, beat: Key | None, tie_ok: bool = False, *,
                 bound: bool | None = None, lower: Key | None = None) -> Plan | None:
    """The best plan on the trial's node among the candidates ``found`` that beats ``beat`` (None:
    any), or None. ``bound`` and ``lower``: ``trial.bound`` of every candidate and
    :func:`lower_bound` when the caller kept them (None: computed here); with ``beat``, the node
    is given up as soon as that lower bound loses."""
    if not (trial.frees(found.sums.cpu, found.sums.freed) if bound is None else bound):
        return None
    if trial.short_of_memory(found.sums.memory):  # no subset of the candidates frees enough
        return None
    cands = found.cands
    if beat is not None:
        lower = lower_bound(trial, found) if lower is None else lower
        if loses(lower, beat, tie_ok) or loses(tightened_bound(trial, found, lower), beat, tie_ok):
            return None
        if no_single_wins(trial, cands, beat, tie_ok):
            return None
    levels = sorted({priority_of(c.spec) for c in cands})
    allowed: list[AllocationState] = []
    for level in levels:
        allowed = [c for c in cands if priority_of(c.spec) <= level]
        if loses((level, level + PRIORITY_OFFSET, 1), beat, tie_ok):
            return None
        if trial.covered(allowed) or (trial.bound(allowed) and trial.fits(allowed) is not None):
            break
    else:
        return None
    victims, fit = reprieve(trial, allowed)
    if len(allowed) <= EXACT_LIMIT:
        victims, fit = exhaustive(trial, allowed, victims, fit, beat, tie_ok)
    key = key_of(victims)
    if loses(key, beat, tie_ok):
        return None
    spec = trial.spec
    ordered = tuple(sorted(victims, key=lambda v: (priority_of(v.spec), v.spec.allocation_id)))
    charges = fit.charges or tuple(charge_on(g, spec) for g in fit.gpus)
    return Plan(trial.node.name, tuple(g.spec.name for g in fit.gpus), charges, ordered, key, fit.partitions)


def no_single_wins(trial: Trial, cands: list[AllocationState], beat: Key, tie_ok: bool) -> bool:
    """Whether the node surely has no plan that beats ``beat``, by one dry run per candidate: True
    when every plan of two or more victims loses (the least such key takes the two candidates of
    the lowest terms) and no single candidate whose one-victim key would win makes the request fit.
    Exact: the node's plan (:func:`best_on_node`) is a set of candidates that fits, so a winning plan
    would be one of those singles. Saves the reprieve and the exhaustive search on the many nodes
    of a full pool that one victim's room would clear but its CPU would not (their plans tie or
    lose)."""
    if len(cands) >= 2:
        low = heapq.nsmallest(2, (term(c) for c in cands))
        second = low[1] - PRIORITY_OFFSET  # term = priority + 2³¹
        if not loses((second, low[0] + low[1], 2), beat, tie_ok):
            return False
    for cand in cands:
        single = (priority_of(cand.spec), term(cand), 1)
        if not loses(single, beat, tie_ok) and trial.single(cand) is not None:
            return False
    return True


def reprieve(trial: Trial, allowed: list[AllocationState]) -> tuple[list[AllocationState], Fit]:
    """kube-scheduler selectVictimsOnNode: start from every candidate, keep (reprieve) each in turn,
    most important first, whenever the request still fits without taking it. A dry run whose
    answer is known is skipped (:meth:`Trial.covered`: a remaining victim alone was found to fit),
    and the set's ``Fit`` is taken once at the end (a dry run depends only on the set)."""
    victims = list(allowed)
    fit: Fit | None = None
    for candidate in allowed:
        rest = [v for v in victims if v is not candidate]
        if rest and trial.bound(rest):
            if trial.covered(rest):
                victims, fit = rest, None
                continue
            found = trial.fits(rest)
            if found is not None:
                victims, fit = rest, found
    if fit is None:
        fit = trial.single(victims[0]) if len(victims) == 1 else trial.fits(victims)
    assert fit is not None
    return victims, fit


def exhaustive(trial: Trial, allowed: list[AllocationState], victims: list[AllocationState], fit: Fit,
               beat: Key | None = None, tie_ok: bool = False) -> tuple[list[AllocationState], Fit]:
    """The best subset of ``allowed`` by (Σ term, count) at the same highest priority, by size,
    starting from the reprieve's ``victims`` (kept on a tie).

    With ``beat`` (the best plan of the search so far; ``tie_ok`` as in :func:`loses`), subsets
    whose key loses against it are not tried when the budget cannot bind (fewer subsets than
    :data:`FIT_BUDGET`): the result is then the same whenever it beats ``beat`` (the same subsets
    are met in the same order, and each one the unpruned search keeps has a lower score than
    every bound either search holds at that point), and loses whenever the unpruned result loses,
    so :func:`best_on_node` answers the same. With the budget in play every subset is counted as
    before, since a pruned search would spend it differently."""
    top = max(priority_of(a.spec) for a in allowed)
    pool = sorted(allowed, key=lambda a: (term(a), a.spec.allocation_id))
    terms = [term(a) for a in pool]
    tops = [priority_of(a.spec) == top for a in pool]
    best = (sum(term(v) for v in victims), len(victims))
    if beat is not None and beat[0] == top and (1 << len(pool)) - 1 < FIT_BUDGET:
        cut = (beat[1], beat[2] + 1) if tie_ok else (beat[1], beat[2])  # scores below it win
        best = min(best, cut)
    budget = FIT_BUDGET
    for size in range(1, len(pool) + 1):
        if (sum(terms[:size]), size) >= best:
            break
        for picked in itertools.combinations(range(len(pool)), size):
            score = (sum([terms[i] for i in picked]), size)
            if score >= best or not any([tops[i] for i in picked]):
                continue
            combo = [pool[i] for i in picked]
            if not trial.bound(combo):
                continue
            budget -= 1
            found = trial.single(combo[0]) if size == 1 else trial.fits(combo)
            if found is not None:
                victims, fit, best = combo, found, score
            if budget <= 0:
                return victims, fit
    return victims, fit


def lower_bound(trial: Trial, cands: CandidateSet) -> Key:
    """A lower bound of any plan's key on this node: the lowest candidate priority, and per GPU the
    fewest candidates whose charges there could cover its deficit (the ``count``-th smallest)."""
    need = trial.need
    counts = _covers(trial, cands)
    count = max(1, counts[need.count - 1] if len(counts) >= need.count else 10**9)
    return (cands.floor, cands.sums.smallest(count), count)


def _covers(trial: Trial, cands: CandidateSet) -> list[int]:
    """Per GPU of the node the fewest candidates whose charges there could cover its deficit
    (0: none lacking; 10⁹: they cannot), ascending."""
    need = trial.need
    held = cands.sums.held
    none: tuple[list[int], list[int]] = ([], [])
    counts = []
    for name, tflops, vram, charges in trial.deficits():
        here = held.get(name, none)
        if need.shared:
            counts.append(len(here[0]) if len(here[0]) == charges else 10**9)
            continue
        counts.append(max(_cover(tflops, here[0]), _cover(vram, here[1])))
    counts.sort()
    return counts


def spread(trial: Trial, cands: CandidateSet) -> int:
    """A lower bound of any plan's victim count on this node from how the GPUs it needs are held:
    the plan frees ``count`` GPUs, each GPU g taking at least cover(g) victims with charges on it
    (:func:`_covers`), and a victim counts toward at most as many of them as it holds GPUs, so
    Σ of the ``count`` smallest covers <= Σ of the victims' GPU spans <= the largest spans of as
    many candidates. Many single-GPU victims for a multi-GPU request: as many victims as GPUs."""
    need = trial.need
    counts = _covers(trial, cands)
    if len(counts) < need.count:
        return 10**9
    return _cover(sum(counts[:need.count]), cands.sums.spans)


def tightened_bound(trial: Trial, cands: CandidateSet, lower: Key) -> Key:
    """``lower`` (:func:`lower_bound`) tightened by the node's CPU and memory: any victim set
    must free the CPU and the memory the request lacks there (``Trial.bound``'s node checks), so
    it has at least as many victims as the fewest candidates whose CPU, and the fewest whose
    memory, covers that deficit. Used only to give a node up before its dry runs, never as the
    node's kept bound (which decides the candidate nodes and their limit)."""
    need, node = trial.need, trial.node
    sums = cands.sums
    count = lower[2]
    if need.count > 1 and not need.partitioned:
        count = max(count, spread(trial, cands))
    if need.cpu_milli and node.cpu_milli:
        count = max(count, _cover(need.cpu_milli - (node.cpu_milli - node.used_cpu_milli), sums.cpus))
    if need.memory_bytes and node.memory_bytes:
        count = max(count, _cover(need.memory_bytes - (node.memory_bytes - node.used_memory_bytes), sums.memories))
    if count <= lower[2]:
        return lower
    return (lower[0], sums.smallest(count), count)


def _cover(deficit: int, amounts: list[int]) -> int:
    """The fewest of ``amounts`` (largest first) summing to at least ``deficit`` (10⁹ when all of
    them cannot)."""
    if deficit <= 0:
        return 0
    total = 0
    for n, amount in enumerate(amounts, 1):
        total += amount
        if total >= deficit:
            return n
    return 10**9

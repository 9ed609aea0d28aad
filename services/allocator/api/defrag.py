"""``GET /api/v1/pools/{pool}/defrag-plan``: the consolidation plan of a pool, dry run
(services.allocator.domain.consolidation), computed on the reader's projection; nothing is written
and nothing moves (executing a plan, ``defrag run``, is not implemented yet: docs/allocation.md).

Query: ``max_moves`` (1-1000, default 10), ``max_share_of_namespace`` (percent 0-100 of each
namespace's granted allocations in the pool that may move, default 100) and ``max_tflops`` (the
TFLOPS of charges in motion at most, a positive quantity such as ``250`` or ``12.5``; default
unbounded). A bad value is 400 naming the parameter; a pool with no node is 404.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from events.quantity import QuantityError, format_milli, to_milli
from services.allocator.api import bounds, paging, views
from services.allocator.api.context import state_of
from services.allocator.domain.consolidation import MAX_MOVES, Budget, ConsolidationPlan, Drain, Move, PoolMeasure, plan
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.strategies.fragmentation import MILLI_GPU

DEFAULT_MOVES = 10
NOT_YET = ("dry run: nothing was moved; executing a plan (gpuledger defrag run) is not implemented yet "
           "(docs/allocation.md)")


def budget_of(params: dict[str, str]) -> Budget:
    """The :class:`Budget` the query asks for; raises ApiError(400) naming the parameter."""
    moves_text = params.get("max_moves", str(DEFAULT_MOVES))
    if not moves_text.isascii() or not moves_text.isdigit() or not 1 <= int(moves_text) <= MAX_MOVES:
        raise bounds.ApiError(400, f"max_moves must be an integer from 1 to {MAX_MOVES}, got {moves_text!r}",
                              field="max_moves")
    share_text = params.get("max_share_of_namespace", "100")
    try:
        share = float(share_text)
    except ValueError:
        share = -1.0
    if not share_text.isascii() or not 0 <= share <= 100:
        raise bounds.ApiError(400, f"max_share_of_namespace must be a percentage from 0 to 100, got {share_text!r}",
                              field="max_share_of_namespace")
    tflops_text = params.get("max_tflops")
    milli: int | None = None
    if tflops_text is not None:
        try:
            milli = to_milli(tflops_text)
        except QuantityError:
            milli = 0
        if milli <= 0:
            raise bounds.ApiError(400, f"max_tflops must be a positive number of TFLOPS such as 250 or 12.5, "
                                       f"got {tflops_text!r}", field="max_tflops")
    return Budget(max_moves=int(moves_text), max_share_of_namespace_pct=share, max_milli_tflops=milli)


def measure_doc(m: PoolMeasure) -> dict[str, Any]:
    """A pool's consolidation figures: busy/idle nodes, unallocatable GPU (F(M) in GPUs), the same
    as TFLOPS, and free GPU (all rounded to three decimals)."""
    return {"busy_nodes": m.busy_nodes, "idle_nodes": m.idle_nodes,
            "unallocatable_gpus": round(m.fragmented_milli_gpu / MILLI_GPU, 3),
            "fragmented_tflops": round(m.fragmented_milli_tflops / 1000, 3),
            "free_gpus": round(m.free_milli_gpu / MILLI_GPU, 3)}


def move_doc(move: Move) -> dict[str, Any]:
    """One move: who, from (node, GPUs), to (node, GPUs, per-GPU charges), what it frees, in words."""
    to: dict[str, Any] = {"node": move.target_node, "gpus": list(move.target_gpus),
                          "charges": [views.resources_view(c) for c in move.charges]}
    if move.partitions:
        to["partitions"] = [{"gpu": g, **views.partition_view(p)}
                            for g, p in zip(move.target_gpus, move.partitions, strict=True)]
    return {"allocation_id": move.allocation_id, "namespace": move.namespace, "pod": move.pod,
            "priority": move.priority, "from": {"node": move.source_node, "gpus": list(move.source_gpus)},
            "to": to, "frees": views.resources_view(move.frees), "explanation": move.sentence()}


def drain_doc(drain: Drain) -> dict[str, Any]:
    """One emptied node: its moves (ids), the pool before and after them, in words."""
    return {"node": drain.node, "moves": [m.allocation_id for m in drain.moves],
            "before": measure_doc(drain.before), "after": measure_doc(drain.after),
            "explanation": drain.sentence()}


def plan_doc(result: ConsolidationPlan) -> dict[str, Any]:
    """The whole plan as the API and ``gpuledger defrag plan --json`` show it."""
    b = result.budget
    return {"pool": result.pool, "dry_run": True, "execution": NOT_YET,
            "budget": {"max_moves": b.max_moves, "max_share_of_namespace": b.max_share_of_namespace_pct,
                       "max_tflops": None if b.max_milli_tflops is None else format_milli(b.max_milli_tflops)},
            "nodes_emptied": list(result.nodes_emptied),
            "moves": [move_doc(m) for m in result.moves],
            "drains": [drain_doc(d) for d in result.drains],
            "skipped": [{"node": s.node, "code": s.code, "reason": s.reason} for s in result.skipped],
            "stopped": result.stopped or None,
            "before": measure_doc(result.before), "after": measure_doc(result.after)}


async def defrag_plan(request: web.Request) -> web.Response:
    """GET /api/v1/pools/{pool}/defrag-plan?max_moves=&max_share_of_namespace=&max_tflops=: the
    consolidation plan (:func:`plan_doc`), computed now on this reader's projection with a fresh
    Scheduler (its cost: services.allocator.domain.consolidation); 404 for a pool with no node."""
    params = paging.query(request, allowed=("max_moves", "max_share_of_namespace", "max_tflops"))
    budget = budget_of(params)
    state = state_of(request)
    pool = request.match_info["pool"]
    if pool not in state.pool_nodes:
        raise bounds.ApiError(404, f"pool {pool!r} has no nodes", field="pool")
    return web.json_response(plan_doc(plan(state, pool, budget, datetime.now(UTC), Scheduler())))

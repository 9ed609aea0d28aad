"""Defragmentation routes: ``GET /api/v1/pools/{pool}/defrag-plan``, the consolidation plan of a pool,
dry run (services.allocator.domain.consolidation), computed on the reader's projection, nothing
written; ``POST /api/v1/pools/{pool}/defrag`` starts a campaign that executes one (a StartDefrag
intent: services.allocator.domain.defrag_campaign), ``GET`` shows the running or last campaign and
``DELETE`` cancels it (docs/allocation.md, "Executing a plan: defrag run").

Query: ``max_moves`` (1-1000, default 10), ``max_share_of_namespace`` (percent 0-100 of each
namespace's granted allocations in the pool that may move, default 100) and ``max_tflops`` (the
TFLOPS of charges in motion at most, a positive quantity such as ``250`` or ``12.5``; default
unbounded); the plan alone also takes ``objective``: ``nodes`` (default: empty the most nodes) or
``fragmentation`` (remove the most FGD fragmentation, one allocation at a time; a dry run only, since
its later moves may land where earlier ones left, which a campaign's reservations, all taken at
once, cannot). A bad value is 400 naming the parameter; a pool with no node is 404.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from events.bounds import MAX_TEXT_LENGTH
from events.defrag import DEFAULT_DEFRAG_DURATION_S, MAX_DEFRAG_DURATION_S, CancelDefrag, StartDefrag
from events.durations import go_duration_s
from events.quantity import QuantityError, format_milli, to_milli
from services.allocator.api import bodies, bounds, paging, views, writes
from services.allocator.api.context import state_of
from services.allocator.domain.campaign_records import Campaign
from services.allocator.domain.consolidation import (
    MAX_MOVES,
    OBJECTIVES,
    Budget,
    ConsolidationPlan,
    Drain,
    Move,
    Objective,
    PoolMeasure,
    plan,
)
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.strategies.fragmentation import MILLI_GPU

DEFAULT_MOVES = 10
NOT_YET = ("dry run: nothing was moved; `gpuledger defrag run POOL` (POST /api/v1/pools/{pool}/defrag) executes "
           "a plan, reserving each target before its source is evicted (docs/allocation.md)")


FRAGMENTATION_DRY = ("dry run: nothing was moved; a plan of the fragmentation objective is shown, not executed "
                     "(`defrag run` executes the nodes objective; docs/allocation.md)")


def objective_of(params: dict[str, str]) -> Objective:
    """The ``objective`` query parameter (default ``nodes``); raises ApiError(400) naming it."""
    text = params.get("objective", "nodes")
    for known in OBJECTIVES:
        if text == known:
            return known
    raise bounds.ApiError(400, f"objective must be one of {', '.join(OBJECTIVES)}, got {text[:64]!r}",
                          field="objective")


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
    return {"pool": result.pool, "dry_run": True, "objective": result.objective,
            "execution": NOT_YET if result.objective == "nodes" else FRAGMENTATION_DRY,
            "budget": {"max_moves": b.max_moves, "max_share_of_namespace": b.max_share_of_namespace_pct,
                       "max_tflops": None if b.max_milli_tflops is None else format_milli(b.max_milli_tflops)},
            "nodes_emptied": list(result.nodes_emptied),
            "moves": [move_doc(m) for m in result.moves],
            "drains": [drain_doc(d) for d in result.drains],
            "skipped": [{"node": s.node, "code": s.code, "reason": s.reason} for s in result.skipped],
            "stopped": result.stopped or None,
            "before": measure_doc(result.before), "after": measure_doc(result.after)}


async def defrag_plan(request: web.Request) -> web.Response:
    """GET /api/v1/pools/{pool}/defrag-plan?max_moves=&max_share_of_namespace=&max_tflops=&objective=: the
    consolidation plan (:func:`plan_doc`), computed now on this reader's projection with a fresh
    Scheduler (its cost: services.allocator.domain.consolidation); 404 for a pool with no node."""
    params = paging.query(request, allowed=("max_moves", "max_share_of_namespace", "max_tflops", "objective"))
    budget, objective = budget_of(params), objective_of(params)
    state = state_of(request)
    pool = request.match_info["pool"]
    if pool not in state.pool_nodes:
        raise bounds.ApiError(404, f"pool {pool!r} has no nodes", field="pool")
    return web.json_response(plan_doc(plan(state, pool, budget, datetime.now(UTC), Scheduler(),
                                              objective=objective)))


def duration_of(text: str, *, field: str = "max_duration") -> int:
    """Whole seconds of a Go duration (``10m``, ``1h30m``) from 1 s to 24 h; raises ApiError(400) naming ``field``."""
    seconds = go_duration_s(text[:64]) if isinstance(text, str) else None
    if seconds is None or not 1 <= seconds <= MAX_DEFRAG_DURATION_S:
        raise bounds.ApiError(400, f'{field} must be a duration from 1s to 24h such as "10m" or "1h30m", '
                                   f"got {str(text)[:64]!r}", field=field)
    return int(seconds)


def campaign_doc(campaign: Campaign) -> dict[str, Any]:
    """A campaign as the API, ``gpuledger defrag status --json`` and the dashboard show it: id, pool,
    state (``running`` or ``ended``), budget, deadline, nodes it empties, open moves (reserved
    targets, expiry), closed moves (completed with the replacement, or cancelled with the code)."""
    cap = campaign.max_milli_tflops
    return {
        "campaign_id": campaign.campaign_id, "pool": campaign.pool,
        "state": "running" if campaign.running else "ended", "trigger": campaign.trigger,
        "started_at": campaign.started_at.isoformat(), "deadline": campaign.deadline.isoformat(),
        "budget": {"max_moves": campaign.max_moves, "max_share_of_namespace": campaign.max_share_of_namespace_pct,
                   "max_tflops": None if cap is None else format_milli(cap)},
        "planned_moves": campaign.planned, "nodes": list(campaign.nodes), "stopped": campaign.stopped or None,
        "completed": campaign.completed, "cancelled": campaign.cancelled,
        "open": [{"allocation_id": r.allocation_id, "namespace": r.spec.namespace, "pod": r.spec.pod,
                  "workload": r.spec.workload, "from": {"node": r.source_node, "gpus": list(r.source_gpus)},
                  "to": {"node": r.target_node, "gpus": list(r.target_gpus),
                         "charges": [views.resources_view(c) for c in r.charges]},
                  "expires_at": r.expires_at.isoformat()} for r in campaign.reservations.values()],
        "closed": [{"allocation_id": o.allocation_id, "status": o.status, "at": o.at.isoformat(),
                    "from": o.source_node, "to": o.target_node, "code": o.code or None, "reason": o.reason or None,
                    "replacement_id": o.replacement_id or None} for o in campaign.outcomes],
        "ended_at": campaign.ended_at.isoformat() if campaign.ended_at else None,
        "end_code": campaign.end_code or None, "end_reason": campaign.end_reason or None,
    }


async def defrag_status(request: web.Request) -> web.Response:
    """GET /api/v1/pools/{pool}/defrag: the pool's running or last campaign (:func:`campaign_doc`);
    404 for a pool that never ran one."""
    paging.query(request, allowed=())
    pool = bodies.pool_name(request.match_info["pool"])
    campaign = state_of(request).campaigns.get(pool)
    if campaign is None:
        raise bounds.ApiError(404, f"pool {pool!r} has run no defrag campaign", field="pool")
    return web.json_response(campaign_doc(campaign))


_RUN_FIELDS = ("max_moves", "max_share_of_namespace", "max_tflops", "max_duration")


async def defrag_run(request: web.Request) -> web.Response:
    """POST /api/v1/pools/{pool}/defrag?wait=: start a campaign (StartDefrag). Body (JSON, every field
    optional): ``max_moves`` (1-1000, default 10), ``max_share_of_namespace`` (percent), ``max_tflops``
    (e.g. ``"250"``), ``max_duration`` (Go duration, default ``10m``, at most ``24h``). 400 names a bad
    field, 404 a pool with no node, 409 a campaign already running there; else the decision
    (``type`` ``defrag_started``) with the campaign as ``campaign`` once this reader shows it."""
    params = paging.query(request, allowed=("wait",))
    wait = writes.wait_of(params)
    pool = bodies.pool_name(request.match_info["pool"])
    body = await bounds.read_object(request) if request.body_exists else {}
    bodies.only(body, _RUN_FIELDS, field="body")
    budget = budget_of({k: str(v) for k, v in body.items() if k != "max_duration" and v is not None
                        and not isinstance(v, bool | dict | list)})
    duration = duration_of(body.get("max_duration", f"{DEFAULT_DEFRAG_DURATION_S}s"))
    state = await writes.fresh_state(request)
    if pool not in state.pool_nodes:
        raise bounds.ApiError(404, f"pool {pool!r} has no nodes", field="pool")
    current = state.campaigns.get(pool)
    if current is not None and current.running:
        raise bounds.ApiError(409, f"campaign {current.campaign_id} is running in pool {pool!r} until "
                                   f"{current.deadline.isoformat()}; cancel it first", field="pool")
    intent = StartDefrag(intent_id=writes.intent_id("defrag"), pool=pool, max_moves=budget.max_moves,
                         max_share_of_namespace_pct=budget.max_share_of_namespace_pct,
                         max_milli_tflops=budget.max_milli_tflops, max_duration_s=duration, trigger="api")

    def adorn(view: dict[str, Any]) -> None:
        campaign = state_of(request).campaigns.get(pool)
        if campaign is not None and campaign.campaign_id == intent.intent_id:
            view["campaign"] = campaign_doc(campaign)

    return await writes.decide(request, intent, wait, adorn)


async def defrag_cancel(request: web.Request) -> web.Response:
    """DELETE /api/v1/pools/{pool}/defrag?wait=&reason=: cancel the running campaign (CancelDefrag):
    its open moves are cancelled and their reservations freed; 404 when none runs."""
    params = paging.query(request, allowed=("wait", "reason"))
    wait = writes.wait_of(params)
    pool = bodies.pool_name(request.match_info["pool"])
    state = await writes.fresh_state(request)
    current = state.campaigns.get(pool)
    if current is None or not current.running:
        raise bounds.ApiError(404, f"no defrag campaign is running in pool {pool!r}", field="pool")
    reason = params.get("reason", "")[:MAX_TEXT_LENGTH] or "cancelled through the API"
    return await writes.decide(request, CancelDefrag(intent_id=writes.intent_id("undefrag"), pool=pool,
                                                     reason=reason), wait)

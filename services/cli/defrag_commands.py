"""``gpuledger defrag``: consolidation (defragmentation) of a pool (docs/allocation.md, "Idle nodes
and consolidation" and "Executing a plan: defrag run").

- ``defrag plan POOL [--max-moves N] [--max-share-of-namespace P] [--max-tflops T]``: the plan, dry
  run, from ``GET /api/v1/pools/{pool}/defrag-plan`` (without ``--max-moves``, the API's default
  budget: 10 moves, as the dashboard's Defrag page); nothing moves.
- ``defrag run POOL --max-moves N [...] [--max-duration 10m] --yes``: start a campaign executing it
  (``POST /api/v1/pools/{pool}/defrag``; its budget is required, since it moves pods): each target
  reserved, then each source pod evicted through
  the Eviction API; its replacement gets the reserved GPUs. Without ``--yes`` it shows the plan and
  starts nothing.
- ``defrag status POOL``: the running or last campaign (``GET``); ``defrag cancel POOL``: stop it
  (``DELETE``), freeing its reservations.

Exit codes: 0 done, 1 unreachable/other, 2 bad input (``{"error", "field"}``: an unknown pool, a
budget out of range, a campaign already running, none to cancel or show, ``run`` without ``--yes``
under ``--json``).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from services.cli import client, output
from services.cli.admin_commands import known_pool
from services.cli.exits import DataDir, JsonOut, guarded
from services.cli.output import BadInput

PoolName = Annotated[str, typer.Argument(help="The pool to consolidate.")]
MaxMoves = Annotated[int, typer.Option("--max-moves", min=1, max=1000, help="Allocations moved at most (1-1000).")]
MaxShare = Annotated[float, typer.Option(
    "--max-share-of-namespace", min=0, max=100,
    help="Percent of each namespace's allocations in the pool that may move (0-100).")]
MaxTflops = Annotated[str | None, typer.Option(
    "--max-tflops", help="TFLOPS of allocations in motion at most (e.g. 250).")]
"""The budget options ``defrag plan`` and ``defrag run`` share (consolidation.Budget)."""
PlanMoves = Annotated[int | None, typer.Option(
    "--max-moves", min=1, max=1000, help="Allocations moved at most (1-1000; default the API's, 10).")]


def defrag_plan(
    pool: PoolName,
    max_moves: PlanMoves = None,
    max_share: MaxShare = 100.0,
    max_tflops: MaxTflops = None,
    objective: Annotated[str, typer.Option(
        "--objective", help="nodes (empty the most nodes, what `defrag run` executes) or fragmentation "
        "(remove the most FGD fragmentation, one allocation at a time; shown only).")] = "nodes",
    data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Plan a consolidation (dry run).

    The moves (allocation -> GPUs on another busy node) that empty the most nodes of POOL within
    the budget, emptiest nodes first, each placed as the allocator would place it; why the other
    nodes cannot be emptied; the pool's busy nodes and fragmentation before and after. Nothing moves."""

    def body() -> None:
        if objective not in ("nodes", "fragmentation"):
            raise BadInput(f"--objective must be nodes or fragmentation, got {objective!r}", field="objective")
        api = client.connect(data_dir)
        known_pool(api, pool)
        plan = api.get(f"/api/v1/pools/{client.quoted(pool)}/defrag-plan", max_moves=max_moves,
                       max_share_of_namespace=f"{max_share:g}", max_tflops=max_tflops, objective=objective)
        if as_json:
            output.emit_json(plan)
            return
        _print(plan)

    guarded(as_json, body)


def _print(plan: dict[str, Any]) -> None:
    before, after = plan.get("before") or {}, plan.get("after") or {}
    emptied = plan.get("nodes_emptied") or []
    output.lines([
        ("pool", plan.get("pool", "")),
        ("nodes emptied", f"{len(emptied)} ({', '.join(emptied) or 'none'}); busy nodes "
                          f"{before.get('busy_nodes')} -> {after.get('busy_nodes')}"),
        ("unallocatable GPU", f"{before.get('unallocatable_gpus')} -> {after.get('unallocatable_gpus')}"),
        ("fragmented TFLOPS", f"{before.get('fragmented_tflops')} -> {after.get('fragmented_tflops')}"),
        ("stopped", plan.get("stopped") or "no: every busy node was tried"),
        ("note", plan.get("execution", "")),
    ])
    moves = [m for m in plan.get("moves") or [] if isinstance(m, dict)]
    output.table(("allocation", "namespace/pod", "from", "to", "frees TFLOPS", "frees VRAM"),
                 [[m.get("allocation_id", ""), f"{m.get('namespace', '')}/{m.get('pod', '')}",
                   f"{(m.get('from') or {}).get('node', '')} ({','.join((m.get('from') or {}).get('gpus') or [])})",
                   f"{(m.get('to') or {}).get('node', '')} ({','.join((m.get('to') or {}).get('gpus') or [])})",
                   output.tflops((m.get("frees") or {}).get("tflops")),
                   output.vram((m.get("frees") or {}).get("vram"))] for m in moves], title=f"moves ({len(moves)})")
    skipped = [s for s in plan.get("skipped") or [] if isinstance(s, dict)]
    if skipped:
        output.table(("node", "code", "why not emptied"),
                     [[s.get("node", ""), s.get("code", ""), s.get("reason", "")] for s in skipped],
                     title=f"not emptied ({len(skipped)})")


def defrag_run(
    pool: PoolName,
    max_moves: MaxMoves,
    max_share: MaxShare = 100.0,
    max_tflops: MaxTflops = None,
    max_duration: Annotated[str, typer.Option(
        "--max-duration", help="The campaign ends (open moves cancelled) after this long: a duration such as "
                               "10m or 1h30m, at most 24h (TensorFusion maxDuration).")] = "10m",
    yes: Annotated[bool, typer.Option("--yes", help="Start it; without --yes the plan is shown and nothing "
                                                    "starts.")] = False,
    data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Execute a consolidation: a defrag campaign.

    Plans POOL as `defrag plan` does, then reserves every move's target GPUs (nothing else can be
    granted there), evicts each source pod through the Eviction API (a PodDisruptionBudget that
    refuses cancels that move and frees its reservation) and grants the reserved GPUs to the
    replacement pod of the same workload. The campaign ends when every move completed or was
    cancelled, at --max-duration, or on `defrag cancel`. Emptied nodes show in `nodes --idle`."""

    def body() -> None:
        api = client.connect(data_dir)
        known_pool(api, pool)
        if not yes:
            plan = api.get(f"/api/v1/pools/{client.quoted(pool)}/defrag-plan", max_moves=max_moves,
                           max_share_of_namespace=f"{max_share:g}", max_tflops=max_tflops)
            if as_json:
                raise output.BadInput("pass --yes to start the campaign (the plan is `defrag plan --json`)",
                                      field="yes")
            _print(plan)
            output.lines([("not started", "pass --yes to start this campaign")])
            return
        wanted: dict[str, Any] = {"max_moves": max_moves, "max_share_of_namespace": max_share,
                                  "max_duration": max_duration}
        if max_tflops is not None:
            wanted["max_tflops"] = max_tflops
        answer = api.request("POST", f"/api/v1/pools/{client.quoted(pool)}/defrag", body=wanted)
        if as_json:
            output.emit_json(answer)
            return
        campaign = answer.get("campaign") if isinstance(answer, dict) else None
        if isinstance(campaign, dict):
            _print_campaign(campaign)
        else:
            output.lines([("campaign", answer.get("intent_id", "") if isinstance(answer, dict) else ""),
                          ("state", "started (not yet shown by this reader: `gpuledger defrag status`)")])

    guarded(as_json, body)


def defrag_status(pool: Annotated[str, typer.Argument(help="The pool.")],
                  data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Show the pool's running or last defrag campaign: open moves (reserved targets, expiry) and
    closed ones (completed with the replacement, or cancelled and why)."""

    def body() -> None:
        campaign = client.connect(data_dir).get(f"/api/v1/pools/{client.quoted(pool)}/defrag")
        if as_json:
            output.emit_json(campaign)
            return
        _print_campaign(campaign)

    guarded(as_json, body)


def defrag_cancel(pool: Annotated[str, typer.Argument(help="The pool.")],
                  reason: Annotated[str, typer.Option("--reason", help="Why, recorded in the log.")] = "",
                  data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Cancel the pool's running defrag campaign: its open moves are cancelled and their
    reservations freed; moves already completed stay."""

    def body() -> None:
        api = client.connect(data_dir)
        answer = api.request("DELETE", f"/api/v1/pools/{client.quoted(pool)}/defrag",
                             query={"reason": reason[:1024]})
        if as_json:
            output.emit_json(answer)
            return
        campaign = api.get(f"/api/v1/pools/{client.quoted(pool)}/defrag")
        _print_campaign(campaign)

    guarded(as_json, body)


def _print_campaign(c: dict[str, Any]) -> None:
    output.lines([
        ("campaign", c.get("campaign_id", "")), ("pool", c.get("pool", "")),
        ("state", c.get("state", "") + (f" ({c.get('end_code')}: {c.get('end_reason')})" if c.get("end_code") else "")),
        ("started", c.get("started_at", "")), ("deadline", c.get("deadline", "")),
        ("nodes to empty", ", ".join(c.get("nodes") or []) or "none"),
        ("moves", f"{c.get('planned_moves', 0)} planned, {c.get('completed', 0)} completed, "
                  f"{c.get('cancelled', 0)} cancelled, {len(c.get('open') or [])} open"),
    ])
    opened = [m for m in c.get("open") or [] if isinstance(m, dict)]
    if opened:
        output.table(("allocation", "namespace/pod", "from", "to (reserved)", "expires"),
                     [[m.get("allocation_id", ""), f"{m.get('namespace', '')}/{m.get('pod', '')}",
                       (m.get("from") or {}).get("node", ""),
                       f"{(m.get('to') or {}).get('node', '')} ({','.join((m.get('to') or {}).get('gpus') or [])})",
                       m.get("expires_at", "")] for m in opened], title=f"open moves ({len(opened)})")
    closed = [m for m in c.get("closed") or [] if isinstance(m, dict)]
    if closed:
        output.table(("allocation", "status", "from", "to", "replacement or reason"),
                     [[m.get("allocation_id", ""), m.get("status", ""), m.get("from", ""), m.get("to", ""),
                       m.get("replacement_id") or f"{m.get('code')}: {m.get('reason')}"] for m in closed],
                     title=f"closed moves ({len(closed)})")


def register(app: typer.Typer) -> None:
    """Add ``defrag plan``, ``run``, ``status`` and ``cancel`` to ``app``."""
    defrag = typer.Typer(help="Consolidation (defragmentation) of a pool: `defrag plan POOL` (dry run), "
                              "`defrag run POOL --yes` (execute), `defrag status POOL`, `defrag cancel POOL`.",
                         no_args_is_help=True, rich_markup_mode=None)
    defrag.command("plan")(defrag_plan)
    defrag.command("run")(defrag_run)
    defrag.command("status")(defrag_status)
    defrag.command("cancel")(defrag_cancel)
    app.add_typer(defrag, name="defrag")

"""``gpuledger defrag plan POOL --max-moves N [--max-share-of-namespace P] [--max-tflops T]``: the
consolidation plan of a pool, dry run, from the reader's ``GET /api/v1/pools/{pool}/defrag-plan``
(docs/allocation.md, "Idle nodes and consolidation"). Nothing is moved: ``defrag run`` does not
exist yet.

Exit codes: 0 done, 1 unreachable/other, 2 bad input (``{"error", "field"}``: an unknown pool, a
budget out of range).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from services.cli import client, output
from services.cli.admin_commands import known_pool
from services.cli.exits import DataDir, JsonOut, guarded


def defrag_plan(
    pool: Annotated[str, typer.Argument(help="The pool to consolidate.")],
    max_moves: Annotated[int, typer.Option("--max-moves", min=1, max=1000,
                                           help="Allocations moved at most (1-1000).")],
    max_share: Annotated[float, typer.Option(
        "--max-share-of-namespace", min=0, max=100,
        help="Percent of each namespace's allocations in the pool that may move (0-100).")] = 100.0,
    max_tflops: Annotated[str | None, typer.Option(
        "--max-tflops", help="TFLOPS of allocations in motion at most (e.g. 250).")] = None,
    data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Plan a consolidation (dry run).

    The moves (allocation -> GPUs on another busy node) that empty the most nodes of POOL within
    the budget, emptiest nodes first, each placed as the allocator would place it; why the other
    nodes cannot be emptied; the pool's busy nodes and fragmentation before and after. Nothing moves."""

    def body() -> None:
        api = client.connect(data_dir)
        known_pool(api, pool)
        plan = api.get(f"/api/v1/pools/{client.quoted(pool)}/defrag-plan", max_moves=max_moves,
                       max_share_of_namespace=f"{max_share:g}", max_tflops=max_tflops)
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


def register(app: typer.Typer) -> None:
    """Add ``defrag plan`` to ``app``."""
    defrag = typer.Typer(help="Consolidation (defragmentation) of a pool: `defrag plan POOL` (dry run).",
                         no_args_is_help=True, rich_markup_mode=None)
    defrag.command("plan")(defrag_plan)
    app.add_typer(defrag, name="defrag")

"""CLI commands that configure and inspect the cluster through the allocator's HTTP API:
``quota set|list|remove``, ``pool list|configure|remove`` (configure: services/cli/pool_commands.py),
``nodes`` (list) and ``nodes show NAME``. A ``--pool`` or ``--phase`` the stack does not know is bad
input naming the known ones (an empty list would look like a real answer).

Every command takes ``--data-dir`` and ``--json``; writes are decided by the allocator like any intent.
Exit codes: 0 done, 1 unreachable/other, 2 bad input (``{"error", "field"}``), 4 rejected.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import typer

from services.cli import client, output
from services.cli.exits import DataDir, JsonOut, guarded
from services.cli.output import BadInput
from services.cli.pool_commands import STRATEGIES_HELP, pool_configure
from services.cli.pool_commands import STRATEGY_NAMES as STRATEGY_NAMES

NodePhase = Literal["Ready", "Unschedulable", "Lost"]
NODE_PHASES: tuple[NodePhase, ...] = ("Ready", "Unschedulable", "Lost")
"""The node phases (events.values.NODE_PHASES; a test keeps them equal), as a constant so that
``--help`` does not import the message contract."""


def _api(data_dir: Any) -> client.Api:
    return client.connect(data_dir)


def _rejected_exit(answer: Any) -> None:
    if isinstance(answer, dict) and str(answer.get("type", "")).endswith("_rejected"):
        raise typer.Exit(output.REJECTED)


# --- quota ------------------------------------------------------------------------------------------

def _amount(tflops: str | None, vram: str | None, name: str) -> dict[str, str] | None:
    if tflops is None and vram is None:
        return None
    amount = {}
    for value, unit, field in ((tflops, "tflops", f"{name}-tflops"), (vram, "vram", f"{name}-vram")):
        if value is None:
            continue
        if output.quantity(value) is None or (output.quantity(value) or 0) < 0:
            raise BadInput(f"--{field} must be a non-negative quantity like 100, 500m or 40Gi, got {value!r}",
                           field=field)
        amount[unit] = value
    return amount


def quota_set(
    namespace: Annotated[str, typer.Argument(help="Namespace the quota bounds.")],
    total_tflops: Annotated[str | None, typer.Option("--total-tflops", help="Σ TFLOPS requested (e.g. 100).")]
    = None,
    total_vram: Annotated[str | None, typer.Option("--total-vram", help="Σ VRAM requested (e.g. 40Gi).")] = None,
    limit_tflops: Annotated[str | None, typer.Option("--limit-tflops", help="Σ TFLOPS limits.")] = None,
    limit_vram: Annotated[str | None, typer.Option("--limit-vram", help="Σ VRAM limits.")] = None,
    max_workers: Annotated[int | None, typer.Option("--max-workers", min=0, help="Granted allocations at most.")]
    = None,
    max_gpu_count: Annotated[int | None, typer.Option("--max-gpu-count", min=0, help="GPUs per workload at most.")]
    = None,
    data_dir: DataDir = None,
    as_json: JsonOut = False,
) -> None:
    """Set a namespace quota.

    Creates or replaces NAMESPACE's GPU quota (TensorFusion GPUResourceQuota); bounds not given are
    unbounded."""

    def body() -> None:
        output.kube_name("namespace", namespace, field="NAMESPACE")
        quota: dict[str, Any] = {}
        for key, value in (("total_requests", _amount(total_tflops, total_vram, "total")),
                           ("total_limits", _amount(limit_tflops, limit_vram, "limit")),
                           ("max_workers", max_workers), ("max_gpu_count", max_gpu_count)):
            if value is not None:
                quota[key] = value
        if not quota:
            raise BadInput("give at least one bound (--total-tflops, --total-vram, --limit-tflops, "
                           "--limit-vram, --max-workers, --max-gpu-count)", field="total-tflops")
        answer = _api(data_dir).request("PUT", f"/api/v1/quotas/{client.quoted(namespace)}", body=quota)
        if as_json:
            output.emit_json(answer)
        else:
            typer.echo(f"quota of {namespace} set")
        _rejected_exit(answer)

    guarded(as_json, body)


def quota_list(show_all: Annotated[bool, typer.Option("--all", help="Also namespaces with usage but no quota.")]
               = False, data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """List quotas.

    Every namespace quota with its usage and the resources past its alert threshold."""

    def body() -> None:
        rows = list(_api(data_dir).items("/api/v1/quotas"))
        rows = [row for row in rows if row.get("quota") is not None] if not show_all else rows
        if as_json:
            output.emit_json(rows)
            return
        output.table(("namespace", "total requests", "total limits", "max workers", "max GPUs", "used", "alert"),
                     [_quota_row(row) for row in rows], title="quotas")

    guarded(as_json, body)


def _quota_row(row: dict[str, Any]) -> list[str]:
    spec = row.get("quota") or {}
    used = row.get("usage") or {}
    return [row.get("namespace", ""), _bound(spec.get("total_requests")), _bound(spec.get("total_limits")),
            "unset" if spec.get("max_workers") is None else str(spec.get("max_workers")),
            "unset" if spec.get("max_gpu_count") is None else str(spec.get("max_gpu_count")),
            (output.request_text(used.get("requests")) + f", {used.get('workers', 0)} workers")
            if used.get("requests") else "-", ", ".join((row.get("status") or {}).get("alerts") or []) or "-"]


def _bound(amount: dict[str, Any] | None) -> str:
    """A quota amount: each dimension in human units, ``unset`` (unbounded) when absent or null."""
    if not amount:
        return "unset"
    tflops = amount.get("tflops")
    vram = amount.get("vram")
    return f"{'unset' if tflops is None else output.tflops(tflops)}, {'unset' if vram is None else output.vram(vram)}"


def quota_remove(namespace: Annotated[str, typer.Argument(help="Namespace whose quota goes.")],
                 data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Remove a namespace quota.

    The namespace becomes unlimited."""

    def body() -> None:
        answer = _api(data_dir).request("DELETE", f"/api/v1/quotas/{client.quoted(namespace)}")
        if as_json:
            output.emit_json(answer if answer is not None else {"namespace": namespace, "removed": True})
        else:
            typer.echo(f"quota of {namespace} removed")

    guarded(as_json, body)


# --- pool -------------------------------------------------------------------------------------------

def pool_list(data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """List pools.

    Pools with their strategy, capacity and free TFLOPS/VRAM."""

    def body() -> None:
        rows = list(_api(data_dir).items("/api/v1/pools"))
        if as_json:
            output.emit_json(rows)
            return
        output.table(("pool", "strategy", "nodes", "GPUs", "TFLOPS", "TFLOPS free", "VRAM", "VRAM free"),
                     [_pool_row(row) for row in rows], title="pools")

    guarded(as_json, body)


def pool_remove(pool: Annotated[str, typer.Argument(help="Pool whose configuration goes.")],
                data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Remove a pool.

    Removes POOL's configuration (what `pool configure` set). Refused (exit 2, naming them) while
    the pool has nodes or live allocations, or when no such pool is configured."""

    def body() -> None:
        answer = _api(data_dir).request("DELETE", f"/api/v1/pools/{client.quoted(pool)}")
        if as_json:
            output.emit_json(answer)
        else:
            typer.echo(f"pool {pool} removed")
        _rejected_exit(answer)

    guarded(as_json, body)


def known_pool(api: client.Api, pool: str | None) -> None:
    """Nothing when ``pool`` is None or a pool the stack knows (with nodes, a configuration or
    allocations); else BadInput (field ``pool``) naming the known pools."""
    if pool is None:
        return
    names = [str(p.get("name")) for p in api.items("/api/v1/pools")]
    if pool not in names:
        raise BadInput(f"unknown pool {pool!r}; known pools: {', '.join(names) or 'none'}", field="pool")


def _pool_row(row: dict[str, Any]) -> list[str]:
    config = row.get("config") or {}
    cap, free = row.get("capacity") or {}, row.get("available") or {}
    return [row.get("name", ""), config.get("placement", row.get("placement", "")), str(row.get("nodes", "")),
            str(row.get("gpus", "")), output.tflops(cap.get("tflops")), output.tflops(free.get("tflops")),
            output.vram(cap.get("vram")), output.vram(free.get("vram"))]


# --- nodes ------------------------------------------------------------------------------------------

def nodes_list(ctx: typer.Context,
               pool: Annotated[str | None, typer.Option("--pool", help="Only this pool.")] = None,
               phase: Annotated[str | None, typer.Option(
                   "--phase", help="Only this phase: " + ", ".join(NODE_PHASES) + ".")] = None,
               limit: Annotated[int, typer.Option("--limit", min=0, help="At most this many nodes (0: all).")] = 0,
               idle: Annotated[bool, typer.Option(
                   "--idle", help="Only idle nodes: no granted allocation (TensorFusion ListNonUsingNodes).")] = False,
               idle_for: Annotated[str | None, typer.Option(
                   "--for", help="With --idle: only nodes idle at least this long (e.g. 30m, 2h, 1h30m).")] = None,
               data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """List GPU nodes.

    Nodes with their pool, phase, GPUs, usage and since when they are idle (`nodes show NAME`
    for one; `--idle [--for 30m]` only the idle ones)."""
    if ctx.invoked_subcommand is not None:
        return

    def body() -> None:
        if phase is not None and phase not in NODE_PHASES:
            raise BadInput(f"--phase must be one of {', '.join(NODE_PHASES)}, got {phase!r}", field="phase")
        if idle_for is not None and not idle:
            raise BadInput("--for needs --idle (it selects nodes idle at least that long)", field="for")
        from events.durations import go_duration_s  # the API's grammar for idle_for; imported late (--help)

        if idle_for is not None and (len(idle_for) > 64 or go_duration_s(idle_for) is None):
            raise BadInput(f"--for must be a duration such as 30m, 2h or 1h30m, got {idle_for!r}", field="for")
        api = _api(data_dir)
        known_pool(api, pool)
        rows = list(api.items("/api/v1/nodes", limit=limit, pool=pool, phase=phase,
                              idle="true" if idle else None, idle_for=idle_for))
        if as_json:
            output.emit_json(rows)
            return
        output.table(("node", "pool", "phase", "GPUs", "TFLOPS", "TFLOPS used", "VRAM", "VRAM used", "allocations",
                      "idle since"),
                     [_node_row(row) for row in rows], title=f"{'idle ' if idle else ''}nodes ({len(rows)})")

    guarded(as_json, body)


def _node_row(row: dict[str, Any]) -> list[str]:
    cap, free = row.get("capacity") or {}, row.get("available") or {}
    cap_t, free_t = output.quantity(cap.get("tflops")), output.quantity(free.get("tflops"))
    cap_v, free_v = output.quantity(cap.get("vram")), output.quantity(free.get("vram"))
    gpus = row.get("gpus")
    return [row.get("name", ""), row.get("pool", ""), row.get("phase", ""),
            str(len(gpus) if isinstance(gpus, list) else gpus if gpus is not None else ""),
            output.tflops(cap.get("tflops")),
            output.usage(None if cap_t is None or free_t is None else cap_t - free_t, cap_t),
            output.vram(cap.get("vram")),
            output.usage(None if cap_v is None or free_v is None else cap_v - free_v, cap_v),
            str(len(row["allocations"]) if isinstance(row.get("allocations"), list) else row.get("allocations", "")),
            str(row.get("idle_since") or "-")]


def nodes_show(name: Annotated[str, typer.Argument(help="Node name.")],
               data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Show one node.

    Its phase, last heartbeat, GPUs with their usage, allocations."""

    def body() -> None:
        if not name.strip():
            raise BadInput("give a node name (gpuledger nodes lists them)", field="NAME")
        node = _api(data_dir).get(f"/api/v1/nodes/{client.quoted(name)}")
        if as_json:
            output.emit_json(node)
            return
        output.lines([("node", node.get("name", name)), ("pool", node.get("pool", "")),
                      ("phase", node.get("phase", "")), ("last heartbeat", node.get("last_heartbeat") or "-"),
                      ("source", node.get("source") or "-")])
        gpus = [g for g in node.get("gpu_list", []) if isinstance(g, dict)]
        output.table(("GPU", "model", "phase", "TFLOPS", "TFLOPS free", "VRAM", "VRAM free", "allocations"),
                     [[g.get("name", ""), g.get("model", ""), g.get("phase", ""),
                       output.tflops((g.get("capacity") or {}).get("tflops")),
                       output.tflops((g.get("available") or {}).get("tflops")),
                       output.vram((g.get("capacity") or {}).get("vram")),
                       output.vram((g.get("available") or {}).get("vram")),
                       ",".join(g.get("allocations", []))] for g in gpus], title="GPUs")
        allocations = [a for a in node.get("allocation_list", []) if isinstance(a, dict)]
        if allocations:
            output.table(("allocation", "namespace", "pod", "status", "GPUs", "request"),
                         [[a.get("allocation_id", ""), a.get("namespace", ""), a.get("pod", ""), a.get("status", ""),
                           ",".join(a.get("gpus") or []), output.request_text(a.get("request"))] for a in allocations],
                         title="allocations")

    guarded(as_json, body)


def register(app: typer.Typer) -> None:
    """Add ``quota``, ``pool`` and ``nodes`` to ``app`` (the API calls are made when a command runs)."""
    quota = typer.Typer(help="Namespace GPU quotas (TensorFusion GPUResourceQuota).", no_args_is_help=True,
                        rich_markup_mode=None)
    quota.command("set")(quota_set)
    quota.command("list")(quota_list)
    quota.command("remove")(quota_remove)
    app.add_typer(quota, name="quota")
    pool = typer.Typer(help="GPU pools: list them, configure their placement, remove one. " + STRATEGIES_HELP,
                       no_args_is_help=True, rich_markup_mode=None)
    pool.command("list")(pool_list)
    pool.command("configure")(pool_configure)
    pool.command("remove")(pool_remove)
    app.add_typer(pool, name="pool")
    nodes = typer.Typer(help="GPU nodes: `nodes` lists them, `nodes show NAME` shows one.",
                        invoke_without_command=True, rich_markup_mode=None)
    nodes.callback()(nodes_list)
    nodes.command("show")(nodes_show)
    app.add_typer(nodes, name="nodes")

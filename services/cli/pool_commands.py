"""``pool configure``: a pool's placement strategy, score weights, workers per node, preemption
scope, isolation policy and topology (docs/allocation.md), enforcement (docs/runtime.md) and its
fair-share settings (usage half-life, reclaim churn bounds; docs/shares.md), through the
allocator's HTTP API.

Options not given keep the pool's current value; a pool the stack does not know is refused unless
``--create`` is given (``pool remove`` removes a configuration again). Exit codes as every admin command: 0 done,
1 unreachable/other, 2 bad input (``{"error", "field"}``), 4 rejected.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from services.cli import client, output
from services.cli.exits import DataDir, JsonOut, guarded
from services.cli.output import BadInput

STRATEGY_NAMES = ("best-fit", "compact-first", "fgd", "fgd-strand", "frag-cpu", "low-load-first",
                  "node-compact-gpu-low-load", "random")
"""The domain registry's strategy names (profile.STRATEGIES; a test keeps them equal), as a constant
so that ``--help`` does not import the domain."""

STRATEGIES_HELP = "Placement strategy: " + ", ".join(STRATEGY_NAMES) + "."
_POLICIES = ("static", "dynamic")
_TOPOLOGY = ("soft", "hard", "off")
_PREEMPTION = ("cluster", "namespace", "off")
_ENFORCEMENT = ("none", "hami-core", "tensor-fusion")


def _defrag(current: Any, schedule: str | None, timezone: str | None, max_duration: str | None,
            max_moves: int | None) -> dict[str, Any] | None:
    """The pool's ``defrag`` object with the given options changed (``schedule`` ``off``: None)."""
    if schedule == "off":
        return None
    base: dict[str, Any] = dict(current) if isinstance(current, dict) else {}
    if not base and schedule is None:
        raise BadInput("the pool has no defrag schedule: give --defrag-schedule first", field="defrag-schedule")
    for key, value in (("schedule", schedule), ("timezone", timezone), ("max_duration", max_duration),
                       ("max_moves", max_moves)):
        if value is not None:
            base[key] = value
    return base


def pool_configure(
    pool: Annotated[str, typer.Argument(help="Pool to configure.")],
    strategy: Annotated[str | None, typer.Option("--strategy", help=STRATEGIES_HELP)] = None,
    vram_weight: Annotated[float | None, typer.Option("--vram-weight", min=0.0, help="Score weight of VRAM %.")]
    = None,
    tflops_weight: Annotated[float | None, typer.Option("--tflops-weight", min=0.0, help="Score weight of TFLOPS %.")]
    = None,
    max_workers_per_node: Annotated[int | None, typer.Option("--max-workers-per-node", min=0,
                                                             help="Allocations per node at most (0: unlimited).")]
    = None,
    preemption: Annotated[str | None, typer.Option(
        "--preemption", help="Victims of preemption: cluster (any namespace), namespace (the preemptor's) or "
        "off.")] = None,
    isolation_policy: Annotated[str | None, typer.Option(
        "--isolation-policy", help="static (each GPU keeps its discovered mode) or dynamic (an idle GPU locks to "
        "the mode of its first allocation).")] = None,
    topology: Annotated[str | None, typer.Option(
        "--topology", help="soft (choose GPUs inside the node by NVLink/NUMA tier), hard (also filter nodes "
        "above --max-topology-tier) or off.")] = None,
    max_topology_tier: Annotated[int | None, typer.Option(
        "--max-topology-tier", min=0, max=3, help="Worst tier a multi-GPU placement may have under hard topology: "
        "0 NVLink, 1 same NUMA, 2 cross-NUMA, 3 unknown.")] = None,
    create: Annotated[bool, typer.Option("--create", help="Create POOL if the stack does not know it yet (without "
                                         "it an unknown pool, e.g. a typo, is refused).")] = False,
    enforcement: Annotated[str | None, typer.Option(
        "--enforcement", help="How grants reach the containers (docs/runtime.md): none (each container sees "
        "exactly its GPUs, shares are not enforced), hami-core (HAMi-core limits VRAM and SMs) or "
        "tensor-fusion (TensorFusion's runtime reads the annotations). Applies to pods admitted after.")] = None,
    defrag_schedule: Annotated[str | None, typer.Option(
        "--defrag-schedule", help="Run a defrag campaign at each tick of this 5-field cron expression, e.g. "
        "'0 3 * * *' (TensorFusion nodeCompaction.defrag.schedule); 'off' removes the schedule.")] = None,
    defrag_timezone: Annotated[str | None, typer.Option(
        "--defrag-timezone", help="IANA time zone of --defrag-schedule (default UTC).")] = None,
    defrag_max_duration: Annotated[str | None, typer.Option(
        "--defrag-max-duration", help="A scheduled campaign ends this long after its tick (default 2h, at most "
        "24h).")] = None,
    defrag_max_moves: Annotated[int | None, typer.Option(
        "--defrag-max-moves", min=1, max=1000, help="Moves of a scheduled campaign at most (default 10).")] = None,
    half_life: Annotated[str | None, typer.Option(
        "--fair-share-half-life", help="Half-life of the usage that orders shares' waiting requests, a duration "
        "such as 30m or 2h (0s: current usage, no decay).")] = None,
    reclaim_min_runtime: Annotated[str | None, typer.Option(
        "--reclaim-min-runtime", help="A borrowed allocation younger than this is not reclaimed, e.g. 5m (0s: "
        "at once).")] = None,
    reclaim_max_per_minute: Annotated[int | None, typer.Option(
        "--reclaim-max-per-minute", min=0, help="Reclaims per minute in the pool at most (0: unbounded).")] = None,
    data_dir: DataDir = None,
    as_json: JsonOut = False,
) -> None:
    """Configure a pool.

    Sets POOL's placement strategy, score weights, workers per node, preemption, isolation
    policy, topology and enforcement (options not given keep their value). A pool the stack does
    not know is refused, naming the known ones, unless --create is given (`pool remove` removes one)."""

    def body() -> None:
        output.kube_name("pool", pool, field="POOL")
        if strategy is not None and strategy not in STRATEGY_NAMES:
            raise BadInput(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGY_NAMES)}", field="strategy")
        for value, known, field in ((preemption, _PREEMPTION, "preemption"),
                                    (isolation_policy, _POLICIES, "isolation-policy"),
                                    (topology, _TOPOLOGY, "topology"),
                                    (enforcement, _ENFORCEMENT, "enforcement")):
            if value is not None and value not in known:
                raise BadInput(f"--{field} must be one of {', '.join(known)}, got {value!r}", field=field)
        durations = {key: _seconds(text, option) for key, text, option in (
            ("fair_share_half_life_s", half_life, "fair-share-half-life"),
            ("reclaim_min_runtime_s", reclaim_min_runtime, "reclaim-min-runtime")) if text is not None}
        changes: dict[str, Any] = durations | {key: value for key, value in (
            ("placement", strategy), ("vram_weight", vram_weight), ("tflops_weight", tflops_weight),
            ("max_workers_per_node", max_workers_per_node), ("preemption", preemption),
            ("isolation_policy", isolation_policy),
            ("topology", topology), ("max_topology_tier", max_topology_tier),
            ("enforcement", enforcement), ("reclaim_max_per_minute", reclaim_max_per_minute)) if value is not None}
        wants_defrag = any(v is not None for v in (defrag_schedule, defrag_timezone, defrag_max_duration,
                                                   defrag_max_moves))
        if not changes and not wants_defrag:
            raise BadInput("give at least one of --strategy, --vram-weight, --tflops-weight, --max-workers-per-node, "
                           "--preemption, --isolation-policy, --topology, --max-topology-tier, --enforcement, "
                           "--fair-share-half-life, --reclaim-min-runtime, --reclaim-max-per-minute, "
                           "--defrag-schedule",
                           field="strategy")
        api = client.connect(data_dir)
        pools = {str(p.get("name")): p for p in api.items("/api/v1/pools")}
        if pool not in pools and not create:
            raise BadInput(f"unknown pool {pool!r}; known pools: {', '.join(sorted(pools)) or 'none'} "
                           "(pass --create to create it)", field="pool")
        if wants_defrag:
            current = (pools.get(pool) or {}).get("config") or {}
            changes["defrag"] = _defrag(current.get("defrag"), defrag_schedule, defrag_timezone, defrag_max_duration,
                                        defrag_max_moves)
        answer: Any = api.request("PUT", f"/api/v1/pools/{client.quoted(pool)}", body=changes)
        if as_json:
            output.emit_json(answer)
        else:
            typer.echo(f"pool {pool} configured: " + ", ".join(f"{k} {v}" for k, v in changes.items()))
        if isinstance(answer, dict) and str(answer.get("type", "")).endswith("_rejected"):
            raise typer.Exit(output.REJECTED)
        if not (pools.get(pool) or {}).get("nodes"):
            with_nodes = sorted(name for name, p in pools.items() if p.get("nodes"))
            typer.echo(f"note: pool {pool!r} has no nodes yet (pools with nodes: {', '.join(with_nodes) or 'none'}); "
                       "the settings apply to the nodes that join it", err=True)

    guarded(as_json, body)


def _seconds(text: str, option: str) -> int:
    """Whole seconds of a duration option (``30m``, ``2h``, ``0s``); BadInput naming ``option``."""
    from events.durations import go_duration_s  # the API's duration grammar; imported late (--help)

    seconds = go_duration_s(text) if len(text) <= 64 else None
    if seconds is None or seconds != int(seconds) or seconds > 2**31 - 1:  # events.bounds.MAX_COUNT
        raise BadInput(f"--{option} must be a duration in whole seconds such as 30m, 2h or 0s, got {text!r}",
                       field=option)
    return int(seconds)

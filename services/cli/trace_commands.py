"""CLI commands of the trace area: ``trace experiment`` (the ATC'23 fill-up experiment),
``trace fairness`` (the multi-tenant share experiment, docs/fairness.md) and ``trace replay`` (a
timed replay of the trace through the running stack).

Both default to the openb files shipped in ``data/openb``. ``trace replay`` plays the first
``--limit`` pods (default 1,000) squeezed into about ``--duration`` seconds (default 60) unless
``--speedup`` is given, shows progress, and runs in its own pool ``trace`` (node names
``trace-...``, namespace ``trace``): the default pool is never touched. Ctrl-C or SIGTERM stops it
after it has released every allocation it still holds.
At the end, and after Ctrl-C, it removes its nodes (and so its pool) again: the stack's totals are
what they were before. Exit codes: 0 ok, 1 anything else (including an unverified replay), 2 bad
input (``{"error", "field"}`` on stdout under ``--json``), 130 interrupted (Ctrl-C / SIGTERM).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from services.cli import endpoints
from services.cli.exits import INTERRUPTED
from services.cli.output import fail

if TYPE_CHECKING:
    from events.intents import RegisterNode
    from services.trace.openb import TracePod

OPENB = Path(__file__).resolve().parents[2] / "data" / "openb"
DEFAULT_NODES = OPENB / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = OPENB / "openb_pod_list_default.csv"

JsonOut = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
NodesCsv = Annotated[Path, typer.Option("--nodes", help="Node CSV (openb_node_list_gpu_node.csv format); "
                                        "default: the shipped data/openb file.")]
PodsCsv = Annotated[Path, typer.Option("--pods", help="Pod CSV (openb_pod_list_*.csv format); "
                                       "default: data/openb/openb_pod_list_default.csv.")]


def _load(nodes: Path, pods: Path, *, as_json: bool) -> tuple[list[RegisterNode], list[TracePod]]:
    from services.discovery.static import InventoryError, load_inventory
    from services.trace.openb import TraceError, trace_pods

    for path, field in ((nodes, "nodes"), (pods, "pods")):
        if not path.is_file():
            fail(f"{path}: no such file", field=field, as_json=as_json)
    try:
        node_intents = load_inventory(nodes, pool="openb")
    except InventoryError as exc:
        fail(str(exc), field="nodes", as_json=as_json)
    try:
        pod_rows = trace_pods(pods)
    except TraceError as exc:
        fail(str(exc), field="pods", as_json=as_json)
    return node_intents, pod_rows


def experiment(
    strategy: Annotated[list[str], typer.Option("--strategy", help="Strategy name (repeat for several): "
                                                "best-fit, compact-first, fgd, frag-cpu, low-load-first, "
                                                "node-compact-gpu-low-load, random.")],
    nodes: NodesCsv = DEFAULT_NODES,
    pods: PodsCsv = DEFAULT_PODS,
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="Seeds 42, 43, … (the paper uses 10).")] = 10,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the unallocated-vs-arrived PNG here.")] = None,
    defrag: Annotated[list[str] | None, typer.Option(
        "--defrag", help="Consolidate once at 100 % arrived, moving at most this share of the allocations "
        "(e.g. 1%; repeat for several), then arrive on to 130 %; report beside the run without.")] = None,
    defrag_objective: Annotated[str, typer.Option(
        "--defrag-objective", help="What the consolidation removes: fragmentation (FGD F(M)) or nodes "
        "(empties the most nodes).")] = "fragmentation",
    as_json: JsonOut = False,
) -> None:
    """Run the ATC'23 fill-up experiment; print unallocated GPU % at 100/110/130 % arrived (with
    --defrag: also requests accepted with and without one consolidation at 100 % arrived)."""
    import msgspec

    from services.allocator.domain import profile
    from services.trace.experiment import run

    for name in strategy:
        if name not in profile.STRATEGIES:
            known = ", ".join(sorted(profile.STRATEGIES))
            fail(f"unknown strategy {name!r}; known: {known}", field="strategy", as_json=as_json)
    budgets = _budgets(defrag or [], defrag_objective, plot, as_json=as_json)
    node_intents, pod_rows = _load(nodes, pods, as_json=as_json)
    if not any(p.demand for p in pod_rows):
        fail(f"{pods}: no GPU demand ({len(pod_rows)} pods, none with num_gpu and gpu_milli above 0); the "
             "experiment fills the GPUs to 130 % of capacity and needs GPU pods", field="pods", as_json=as_json)
    trace = pods.stem.removeprefix("openb_pod_list_")
    if budgets:
        _defrag(node_intents, pod_rows, strategy, seeds, trace, budgets, defrag_objective, as_json=as_json)
        return
    results = [run(node_intents, pod_rows, strategy=name, seeds=seeds, trace=trace)[0]
               for name in strategy]
    if plot is not None:
        from services.trace.plot import plot_curves

        plot_curves(results, plot, title=f"{trace}: unallocated GPU vs arrived ({seeds} seeds, median)")
    if as_json:
        out = [msgspec.to_builtins(r) for r in results]
        for item in out:
            item.pop("curve_median", None)
        typer.echo(json.dumps(out[0] if len(out) == 1 else out))
        return
    for r in results:
        points = "  ".join(f"{x}%: {v:.2f}" for x, v in r.unallocated_pct.items())
        typer.echo(f"{r.strategy:<28} {r.trace}  seeds={r.seeds}  unallocated {points}  "
                   f"({r.decisions_per_s:.0f} decisions/s)")


def _budgets(texts: list[str], objective: str, plot: Path | None, *, as_json: bool) -> list[float]:
    from services.trace.defrag import parse_budget

    if objective not in ("fragmentation", "nodes"):
        fail(f"unknown defrag objective {objective!r}; known: fragmentation, nodes", field="defrag_objective",
             as_json=as_json)
    if texts and plot is not None:
        fail("--plot draws the run without defrag only; drop --plot or --defrag", field="plot", as_json=as_json)
    out = []
    for text in texts:
        try:
            out.append(parse_budget(text))
        except ValueError as exc:
            fail(str(exc), field="defrag", as_json=as_json)
    return out


def _defrag(nodes: list[RegisterNode], pods: list[TracePod], strategies: list[str], seeds: int, trace: str,
            budgets: list[float], objective: str, *, as_json: bool) -> None:
    import math

    import msgspec

    from services.allocator.domain.consolidation import Objective
    from services.trace import defrag

    chosen: Objective = "nodes" if objective == "nodes" else "fragmentation"
    results = [r for name in strategies
               for r in defrag.run(nodes, pods, strategy=name, seeds=seeds, budgets_pct=budgets, trace=trace,
                                   objective=chosen)]
    if as_json:
        out = [msgspec.to_builtins(r) for r in results]
        typer.echo(json.dumps(out))
        return
    for r in results:
        without, with_ = r.unallocated_pct_without.get("130", math.nan), r.unallocated_pct.get("130", math.nan)
        typer.echo(f"{r.strategy:<28} {r.trace}  seeds={r.seeds}  defrag {r.budget_pct:g} % ({r.objective}): "
                   f"moved {r.moved_pct:.2f} % ({r.moves:.0f}), F(M) {r.frag_before / 1000:.1f} -> "
                   f"{r.frag_after / 1000:.1f} GPUs; unallocated at 130 %: {without:.2f} -> {with_:.2f}; "
                   f"accepted {r.accepted_without:.0f} -> {r.accepted:.0f} of {r.requests:.0f} "
                   f"({r.gain_requests:+.0f}, {r.gain_requests_per_pct_moved:+.1f} per % moved)")


def fairness(
    policy: Annotated[list[str] | None, typer.Option("--policy", help="Policy (repeat for several; default: all): "
                                                     "no-quotas, hard-quotas, borrow, reclaim, fair-share, "
                                                     "reclaim-all.")] = None,
    nodes: NodesCsv = DEFAULT_NODES,
    pods: PodsCsv = DEFAULT_PODS,
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="Seeds 42, 43, … (runs per policy).")] = 1,
    scale: Annotated[float, typer.Option("--scale", min=1e-6, max=1.0, help="Fraction of the trace's nodes "
                                         "(every k-th node, k = round(1/scale)).")] = 0.03,
    hours: Annotated[float, typer.Option("--hours", min=0.01, help="Simulated hours per run.")] = 4.0,
    warmup: Annotated[float, typer.Option("--warmup", min=0.0, help="Unmeasured hours at the start.")] = 1.0,
    as_json: JsonOut = False,
) -> None:
    """Run the multi-tenant share experiment: 4 shares (40/30/20/10 % guarantees) with bursty openb
    arrivals; per policy: utilisation, time below guarantee, time to restore it, preemptions, Jain."""
    from services.trace import fairness as experiment

    chosen = policy or list(experiment.POLICIES)
    for name in chosen:
        if name not in experiment.POLICIES:
            fail(f"unknown policy {name!r}; known: {', '.join(experiment.POLICIES)}", field="policy",
                 as_json=as_json)
    if warmup >= hours:
        fail(f"--warmup {warmup} must be below --hours {hours}", field="warmup", as_json=as_json)
    node_intents, pod_rows = _load(nodes, pods, as_json=as_json)
    settings = experiment.Settings(horizon_s=hours * 3600, warmup_s=warmup * 3600, scale=scale)
    try:
        results = experiment.run(node_intents, pod_rows, policies=chosen, seeds=seeds, settings=settings)
    except ValueError as exc:
        fail(str(exc), field="pods" if str(exc).startswith("pods") else "scale", as_json=as_json)
    if as_json:
        typer.echo(json.dumps(experiment.to_json(results)))
        return
    typer.echo(experiment.table(results))


def replay(
    nodes: NodesCsv = DEFAULT_NODES,
    pods: PodsCsv = DEFAULT_PODS,
    limit: Annotated[int, typer.Option("--limit", min=0, help="Replay only the first N pods (0: all 8,152).")]
    = 1000,
    duration: Annotated[float, typer.Option("--duration", min=1.0, help="Squeeze the replayed trace time into "
                                            "about this many seconds (ignored with --speedup).")] = 60.0,
    speedup: Annotated[float | None, typer.Option("--speedup", min=1e-6, help="Compress trace time by K "
                                                  "(default: from --duration).")] = None,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="Data dir of `gpuledger up`.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=1.0, help="Give up when no decision came for this "
                                           "many seconds (node registration, the last outcomes).")] = 60.0,
    as_json: JsonOut = False,
) -> None:
    """Replay the trace with real arrivals and departures through NATS → allocator → PostgreSQL, in
    its own pool `trace`; Ctrl-C releases what it holds, then stops."""
    import asyncio

    from services.cli import bus
    from services.cli.client import StackUnreachable
    from services.trace.replay import ReplayError, trace_span

    try:
        found = endpoints.resolve(data_dir)
    except endpoints.EndpointsError as exc:
        fail(str(exc), field=exc.field, code=1, as_json=as_json)
    if not found.nats_url or not found.database_url:
        fail("the stack's NATS and database URLs are both needed", field="data_dir", code=1, as_json=as_json)
    try:
        asyncio.run(_reachable(bus, found.nats_url, found.source))
    except StackUnreachable as exc:
        fail(str(exc), field=None, as_json=as_json)
    node_intents, pod_rows = _load(nodes, pods, as_json=as_json)
    chosen = pod_rows[:limit] if limit else pod_rows
    factor = speedup if speedup is not None else trace_span(chosen) / duration
    try:
        report = asyncio.run(_replay(node_intents, chosen, found, factor, timeout, as_json))
    except ReplayError as exc:
        fail(str(exc), field=None, as_json=as_json)
    if as_json:
        import msgspec

        typer.echo(json.dumps(msgspec.to_builtins(report)))
    else:
        typer.echo(report.summary())
    if report.interrupted:
        raise typer.Exit(INTERRUPTED)
    if not report.verified:
        raise typer.Exit(1)


async def _reachable(bus: Any, url: str, where: str) -> None:
    await bus.close(await bus.connect(url, name="gpuledger-trace-replay-check", where=where))


async def _replay(nodes: list[RegisterNode], pods: list[TracePod], found: endpoints.Endpoints, speedup: float,
                  timeout: float, as_json: bool) -> Any:
    import asyncio

    from services.cli.progress import Meter
    from services.shared import lifecycle
    from services.trace.replay import replay_trace

    stop = asyncio.Event()
    lifecycle.install_stop_signals(stop)
    try:
        with Meter("trace replay", 1) as meter:
            def progress(done: int, total: int, allocated: float) -> None:
                meter.total = total
                meter.update(done, f"allocated {allocated:.1f} % of GPU")

            return await replay_trace(nodes, pods, nats_url=found.nats_url, database_url=found.database_url,
                                      speedup=speedup, timeout_s=timeout, stop=stop, progress=progress)
    finally:
        lifecycle.remove_stop_signals()


def register(app: typer.Typer) -> None:
    """Add ``trace experiment``, ``trace fairness`` and ``trace replay`` to ``app``."""
    group = typer.Typer(help="The Alibaba GPU-sharing trace: placement experiment and timed replay.",
                        no_args_is_help=True, rich_markup_mode=None)
    group.command("experiment")(experiment)
    group.command("fairness")(fairness)
    group.command("replay")(replay)
    app.add_typer(group, name="trace")

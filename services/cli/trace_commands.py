"""CLI commands of the trace area: ``trace experiment`` (the ATC'23 fill-up experiment) and
``trace replay`` (a timed replay of the trace through the running stack).

Exit codes: 0 ok, 2 bad input (``{"error", "field"}`` on stdout under ``--json``), 1 anything else.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import msgspec
import typer

from events.intents import RegisterNode
from services.cli import endpoints
from services.cli.output import fail
from services.discovery.static import InventoryError, load_inventory
from services.trace.openb import TraceError, TracePod, trace_pods

JsonOut = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
NodesCsv = Annotated[Path, typer.Option("--nodes", help="Node CSV (openb_node_list_gpu_node.csv format).")]
PodsCsv = Annotated[Path, typer.Option("--pods", help="Pod CSV (openb_pod_list_*.csv format).")]


def _load(nodes: Path, pods: Path, *, as_json: bool) -> tuple[list[RegisterNode], list[TracePod]]:
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
    nodes: NodesCsv,
    pods: PodsCsv,
    strategy: Annotated[list[str], typer.Option("--strategy", help="Strategy name (repeat for several).")],
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="Seeds 42, 43, … (the paper uses 10).")] = 10,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the unallocated-vs-arrived PNG here.")] = None,
    as_json: JsonOut = False,
) -> None:
    """Run the ATC'23 fill-up experiment; print unallocated GPU % at 100/110/130 % arrived."""
    from services.allocator.domain import profile
    from services.trace.experiment import run

    for name in strategy:
        if name not in profile.STRATEGIES:
            known = ", ".join(sorted(profile.STRATEGIES))
            fail(f"unknown strategy {name!r}; known: {known}", field="strategy", as_json=as_json)
    node_intents, pod_rows = _load(nodes, pods, as_json=as_json)
    trace = pods.stem.removeprefix("openb_pod_list_")
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


def replay(
    nodes: NodesCsv,
    pods: PodsCsv,
    speedup: Annotated[float, typer.Option("--speedup", min=1e-6, help="Compress trace time by K.")] = 1000.0,
    limit: Annotated[int, typer.Option("--limit", min=0, help="Replay only the first N pods (0: all).")] = 0,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="Data dir of `gpuledger up`.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for outcomes at the end.")] = 60.0,
    as_json: JsonOut = False,
) -> None:
    """Replay the trace with real arrivals and departures through NATS → allocator → PostgreSQL."""
    from services.trace.replay import ReplayError, replay_trace

    try:
        found = endpoints.resolve(data_dir)
    except endpoints.EndpointsError as exc:
        fail(str(exc), field=exc.field, as_json=as_json)
    if not found.nats_url or not found.database_url:
        fail("the stack's NATS and database URLs are both needed", field="data_dir", as_json=as_json)
    node_intents, pod_rows = _load(nodes, pods, as_json=as_json)
    try:
        report = asyncio.run(replay_trace(
            node_intents, pod_rows[:limit] if limit else pod_rows, nats_url=found.nats_url,
            database_url=found.database_url, speedup=speedup, timeout_s=timeout))
    except ReplayError as exc:
        fail(str(exc), field=None, as_json=as_json)
    if as_json:
        typer.echo(json.dumps(msgspec.to_builtins(report)))
        return
    typer.echo(report.summary())
    if not report.verified:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``trace experiment`` and ``trace replay`` to ``app``."""
    group = typer.Typer(help="The Alibaba GPU-sharing trace: placement experiment and timed replay.",
                        no_args_is_help=True)
    group.command("experiment")(experiment)
    group.command("replay")(replay)
    app.add_typer(group, name="trace")

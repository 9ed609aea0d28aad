"""CLI commands of the stack area: ``up``, ``allocator``, ``api``, ``submit``, ``status``, ``simulate``.

``submit``, ``status`` and ``simulate`` talk to the allocator's HTTP API (services.cli.client);
``up``, ``allocator`` and ``api`` import the services only when they run, so ``--help`` stays fast.
Exit codes: 0 done/granted, 1 stack unreachable or other failure, 2 bad input (``{"error",
"field"}`` on stdout under ``--json``), 3 queued, 4 rejected (``submit``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from services.cli import client, endpoints, output
from services.cli.exits import DataDir, JsonOut, guarded
from services.cli.output import BadInput, fail

ENABLED_LABEL = "tensor-fusion.ai/enabled"
"""The label that makes the admission webhook handle a pod (services.podspec.keys.ENABLED)."""

MAX_WAIT_S = 60.0
"""Longest decision wait the API accepts (``?wait=``)."""

PodFile = Annotated[Path, typer.Argument(metavar="POD.yaml", help="A Pod manifest (YAML or JSON).")]


def read_pod(path: Path) -> dict[str, Any]:
    """The first YAML/JSON document of ``path``, which must be a Pod; raises BadInput naming the
    file, or ``kind`` for another kind of object (a Deployment's pods are created by Kubernetes and
    reach the allocator through the admission webhook)."""
    import yaml

    try:
        document = next(iter(yaml.safe_load_all(path.read_text())), None)
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}", field="POD") from exc
    except yaml.YAMLError as exc:
        raise BadInput(f"{path} is not YAML: {exc}", field="POD") from exc
    if not isinstance(document, dict):
        raise BadInput(f"{path} does not hold a Pod object", field="POD")
    kind = document.get("kind")
    if kind != "Pod":
        raise BadInput(f"{path} is a {kind or 'manifest without kind'}, not a Pod: submit takes one Pod manifest "
                       "(the pods of a Deployment, Job, ... are submitted by the admission webhook when "
                       "Kubernetes creates them)", field="kind")
    return document


def labelled(pod: dict[str, Any], *, force: bool) -> dict[str, Any]:
    """``pod`` when it carries ``tensor-fusion.ai/enabled: "true"`` (the admission webhook skips
    others) or ``force`` is given (the API is then asked with ``?force=true``); raises BadInput
    otherwise."""
    metadata = _mapping(pod.get("metadata"))
    labels = _mapping(metadata.get("labels"))
    if labels.get(ENABLED_LABEL) == "true":
        return pod
    if not force:
        raise BadInput(f"pod {metadata.get('namespace', 'default')}/{metadata.get('name', '')} is not labelled "
                       f"{ENABLED_LABEL}: \"true\"; the admission webhook would let it run without a GPU "
                       "allocation. Add the label, or pass --force to submit it anyway",
                       field=f"metadata.labels.{ENABLED_LABEL}")
    return pod


def print_notes(pod: dict[str, Any]) -> None:
    """``note: ...`` on stderr for each TensorFusion annotation of ``pod`` that gpuledger ignores;
    BadInput naming a ``tensor-fusion.ai/*`` key neither gpuledger nor TensorFusion knows, with the
    closest known one (services.podspec.known, the parser's own check), before any connection."""
    from services.podspec import PodSpecError  # imported when used: --help stays fast
    from services.podspec.known import check_keys

    annotations = _mapping(_mapping(pod.get("metadata")).get("annotations"))
    try:
        notes = check_keys({str(k): str(v) for k, v in annotations.items()})
    except PodSpecError as exc:
        raise BadInput(str(exc), field=exc.field) from None
    for note in notes:
        typer.echo(f"note: {note}", err=True)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def outcome_code(view: dict[str, Any]) -> int:
    """The exit code of a ``submit`` answer: granted 0, queued 3, rejected 4, intent_rejected 2; an
    ``existing`` live allocation (a repeated submit) by its status."""
    kind = str(view.get("type") or "")
    if kind in ("", "existing"):
        kind = str(view.get("status") or "")
    return output.OUTCOME_CODES.get(kind, output.OTHER)


def print_outcome(view: dict[str, Any]) -> None:
    """Text of an outcome (``submit``/``simulate``): type, pod, node and GPUs, request, reason."""
    kind = view.get("type") or view.get("status", "")
    typer.echo(f"{kind}: {view.get('namespace', '')}/{view.get('pod', '')} "
               f"(allocation {view.get('allocation_id', '')})")
    if view.get("node"):
        typer.echo(f"  node {view['node']}, GPUs {', '.join(view.get('gpus') or [])}")
    if view.get("request"):
        typer.echo(f"  request {output.request_text(view['request'])}, limit "
                   f"{output.request_text(view.get('limit'), unset=True)}")
    if view.get("preempted"):
        typer.echo(f"  preempts {', '.join(view['preempted'])} (their pods are evicted before this one starts)")
    if view.get("reason"):
        typer.echo(f"  reason: {view['reason']}")
    if view.get("position") is not None:
        typer.echo(f"  log position {view['position']}")


def up(data_dir: Path = typer.Option(endpoints.DEFAULT_DATA_DIR, "--data-dir", help="State directory."),
       inventory: Path | None = typer.Option(None, "--inventory", help="YAML inventory or node CSV."),
       http_port: int = typer.Option(0, "--http-port", help="HTTP API and dashboard port (0: any free)."),
       as_json: bool = typer.Option(False, "--json", help="Once up, print one JSON line {\"status\": \"up\", "
                                    "\"nats\", \"database\", \"allocator\", \"dashboard\", \"webhook\", "
                                    "\"endpoints\"} on stdout, and {\"status\": \"stopped\"} at the end; "
                                    "progress goes to stderr."),
       no_token: bool = typer.Option(False, "--no-token",
                                     help="Serve the API and dashboard without a token (local experiments only).")
       ) -> None:
    """Start the whole stack.

    NATS, PostgreSQL, the allocator, one reader (the HTTP API and the dashboard) and the other
    services, until Ctrl-C. One `up` per data dir: a second one exits 2 naming the holder. The API
    needs the token generated in DATA_DIR/secrets/api-token (the CLI reads it) unless
    GPULEDGER_API_TOKEN is set or --no-token."""
    from services.cli.datalock import DataDirLock, DataDirLocked

    if inventory is not None and not inventory.is_file():
        fail(f"inventory file {inventory} not found", field="inventory", code=2, as_json=as_json)
    nodes = _read_inventory(inventory, as_json=as_json) if inventory is not None else None
    lock = DataDirLock(data_dir.resolve())
    try:
        lock.acquire()
    except DataDirLocked as exc:
        fail(str(exc), field="data_dir", code=output.BAD_INPUT, as_json=as_json)
    try:
        _run_up(data_dir, inventory, http_port, nodes, as_json=as_json, api_token=not no_token)
    finally:
        lock.release()


def _read_inventory(path: Path, *, as_json: bool) -> list[Any] | None:
    """The RegisterNode intents of ``--inventory``, read before anything starts, so a bad file
    exits 2 naming its field instead of starting and stopping the stack; None when the loader
    (the discovery area) is not installed."""
    from services.cli import stack

    try:
        return stack.load_inventory(path)
    except ImportError:
        return None
    except (ValueError, OSError) as exc:  # InventoryError is a ValueError; a bad encoding too
        where = getattr(exc, "field", "")
        fail(str(exc), field=f"inventory {where}".strip(), code=2, as_json=as_json)


def _run_up(data_dir: Path, inventory: Path | None, http_port: int, nodes: list[Any] | None, *,
            as_json: bool, api_token: bool) -> None:
    import asyncio

    from rich.console import Console

    from services.cli import stack
    from services.shared import lifecycle, logs

    logs.setup("warning")
    console = Console(stderr=as_json)  # under --json stdout carries only the JSON lines
    options = stack.UpOptions(data_dir=data_dir, inventory=inventory, http_port=http_port, nodes=nodes,
                              json_out=as_json, api_token=api_token)

    async def main(stop: asyncio.Event) -> None:
        await stack.run_up(options, stop, console=console)

    guarded(as_json, lambda: lifecycle.run_service(main))
    console.print("gpuledger stopped")
    if as_json:
        output.emit_json({"status": "stopped"})


def allocator() -> None:
    """Run one allocator replica.

    Settings come from GPULEDGER_* variables; it runs until SIGTERM."""
    import functools

    from services.allocator import bootstrap
    from services.allocator import settings as allocator_settings
    from services.shared import lifecycle, logs
    from services.shared.settings import DATABASE_URL_ENV, SettingsError

    try:
        config = allocator_settings.load()
    except SettingsError as exc:
        fail(str(exc), field="settings", as_json=False)
    if not config.database_url:
        fail(f"{DATABASE_URL_ENV} is not set", field=DATABASE_URL_ENV, code=2, as_json=False)
    logs.setup(config.log_level, json=config.log_json)
    guarded(False, lambda: lifecycle.run_service(functools.partial(bootstrap.serve, config)))


def api() -> None:
    """Run one reader: the HTTP API and the dashboard.

    It follows the event log in PostgreSQL with its own projection and publishes writes to NATS
    as intents, apart from the allocator (which serves only its probes). Settings come from
    GPULEDGER_* variables (DATABASE_URL, NATS_URL, HTTP_HOST, HTTP_PORT, POLL_S, NICE); it runs until
    SIGTERM. Run as many as you like."""
    import os

    from services.allocator import reader
    from services.shared import lifecycle, logs
    from services.shared.settings import DATABASE_URL_ENV, SettingsError

    try:
        config = reader.load()
    except SettingsError as exc:
        fail(str(exc), field="settings", as_json=False)
    if not config.database_url:
        fail(f"{DATABASE_URL_ENV} is not set", field=DATABASE_URL_ENV, code=2, as_json=False)
    logs.setup(config.log_level, json=config.log_json)
    if config.nice:
        os.nice(config.nice)

    async def run(stop: Any) -> None:
        await reader.serve_reader(config, stop)

    guarded(False, lambda: lifecycle.run_service(run))


def submit(pod_file: PodFile,
           timeout: float = typer.Option(30.0, "--timeout", min=0.1, help="Seconds to wait for the decision."),
           force: bool = typer.Option(False, "--force", help=f"Submit a pod without the {ENABLED_LABEL} label."),
           data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Request a GPU share for a Pod.

    Prints the allocator's decision. Idempotent per namespace/pod: while that pod has a live
    allocation, submitting it again returns that allocation. Refuses other kinds (a Deployment)
    and pods the webhook would skip (unlabelled; --force submits them anyway)."""

    def body() -> dict[str, Any]:
        pod = labelled(read_pod(pod_file), force=force)
        print_notes(pod)
        api = client.connect(data_dir, timeout_s=timeout + 5)
        query = {"wait": f"{min(timeout, MAX_WAIT_S):g}", "force": "true" if force else None}
        view: dict[str, Any] = api.request("POST", "/api/v1/allocations", body=pod, query=query)
        return view

    view = guarded(as_json, body)
    output.emit_json(view) if as_json else print_outcome(view)
    raise typer.Exit(outcome_code(view))


def status(data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Show capacity and usage.

    Per pool capacity, free and used TFLOPS/VRAM, nodes and GPUs by phase, allocation counts
    (`nodes` and `gpuledger nodes show` list them one by one), and per share and pool its used,
    borrowed, lent and fair share (`gpuledger shares list`)."""
    view = guarded(as_json, lambda: client.connect(data_dir).get("/api/v1/status"))
    output.emit_json(view) if as_json else print_status(view)


def print_status(view: dict[str, Any]) -> None:
    """Text of ``status``: a pools table (capacity, free, used %), nodes and GPUs by phase, allocations,
    then one line per share and pool (:func:`share_lines`)."""
    rows = []
    for pool in view.get("pools", []):
        cap, free = pool.get("capacity") or {}, pool.get("available") or {}
        cap_t, free_t = output.quantity(cap.get("tflops")), output.quantity(free.get("tflops"))
        cap_v, free_v = output.quantity(cap.get("vram")), output.quantity(free.get("vram"))
        counts = pool.get("allocations") or {}
        rows.append([pool.get("name", ""), str(pool.get("nodes", "")), str(pool.get("gpus", "")),
                     output.tflops(cap.get("tflops")), output.tflops(free.get("tflops")),
                     output.usage(None if cap_t is None or free_t is None else cap_t - free_t, cap_t),
                     output.vram(cap.get("vram")), output.vram(free.get("vram")),
                     output.usage(None if cap_v is None or free_v is None else cap_v - free_v, cap_v),
                     f"{counts.get('granted', 0)}/{counts.get('queued', 0)}"])
    output.table(("pool", "nodes", "GPUs", "TFLOPS", "TFLOPS free", "TFLOPS used", "VRAM", "VRAM free", "VRAM used",
                  "granted/queued"), rows, title="pools")
    typer.echo(f"nodes: {_by_phase(view.get('nodes_by_phase') or {})}")
    typer.echo(f"GPUs:  {_by_phase(view.get('gpus_by_phase') or {})}")
    counts = view.get("allocations", {})
    typer.echo(f"allocations: {counts.get('granted', 0)} granted, {counts.get('queued', 0)} queued; "
               f"log position {view.get('position', 0)}")
    for line in share_lines(view.get("shares") or []):
        typer.echo(line)


def share_lines(shares: list[dict[str, Any]]) -> list[str]:
    """One line per share and pool of ``/api/v1/status`` (docs/shares.md): used of guaranteed per
    resource the share is guaranteed or uses, then borrowed, lent, fair share and waiting requests."""
    from services.cli.share_commands import figure_text  # the share commands' wording of an amount

    out = []
    for entry in shares:
        label = f"{entry['parent']}/{entry['share']}" if entry.get("parent") else entry.get("share", "")
        used, guaranteed = entry.get("used") or {}, entry.get("guaranteed") or {}
        held = []
        for key, word in (("tflops", output.tflops), ("vram", output.vram)):
            if output.quantity(guaranteed.get(key)):
                held.append(f"{word(used.get(key))} of {word(guaranteed.get(key))}")
            elif output.quantity(used.get(key)):
                held.append(f"{word(used.get(key))} (none guaranteed)")
        if guaranteed.get("gpus"):
            held.append(f"{used.get('gpus', 0)} of {guaranteed.get('gpus', 0)} GPUs")
        elif used.get("gpus"):
            held.append(f"{used.get('gpus', 0)} GPUs (none guaranteed)")
        out.append(f"share {label} in {entry.get('pool', '')}: used {'; '.join(held) or 'nothing'}; "
                   f"borrowed {figure_text(entry.get('borrowed'))}; lent {figure_text(entry.get('lent'))}; "
                   f"fair share {figure_text(entry.get('fair_share'))}; {entry.get('waiting', 0)} waiting")
    return out


def _by_phase(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    return f"{total:,}" + (f" ({', '.join(f'{n:,} {phase}' for phase, n in sorted(counts.items()))})" if counts else "")


def simulate(pod_file: PodFile, data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Show what a Pod would get.

    What the allocator would decide for the Pod now, and why (nothing is written)."""

    def body() -> dict[str, Any]:
        pod = read_pod(pod_file)
        print_notes(pod)
        result: dict[str, Any] = client.connect(data_dir).request("POST", "/api/v1/simulate", body=pod)
        return result

    result = guarded(as_json, body)
    if as_json:
        output.emit_json(result)
        return
    if result.get("outcome") is not None:
        print_outcome(result["outcome"])
    else:
        asked = result.get("allocation_request") or {}
        typer.echo(f"no new decision for {asked.get('namespace', '')}/{asked.get('pod', '')}: it already has a live "
                   f"allocation (`gpuledger why {asked.get('namespace', '')}/{asked.get('pod', '')}` explains it)")
    print_preemption(result.get("preemption"))
    for line in output.device_lines(result.get("device")):
        typer.echo(f"  {line}")
    for item in result.get("filters", []):
        typer.echo(f"  filter {item['name']}: removed {item['removed']} GPUs")


def print_preemption(plan: Any) -> None:
    """Text of simulate's preemption or reclaim plan (victims, node, GPUs) or why there is none."""
    if not isinstance(plan, dict):
        return
    if plan.get("possible"):
        victims = ", ".join(f"{v.get('allocation_id')} (priority {v.get('priority')}, "
                            f"GPUs {', '.join(v.get('gpus') or [])})" for v in plan.get("victims") or [])
        kind = "reclaim" if plan.get("kind") == "reclaim" else "preemption"
        typer.echo(f"  {kind} plan: node {plan.get('node')}, GPUs {', '.join(plan.get('gpus') or [])}; "
                   f"victims {victims}")
    elif plan.get("reason"):
        typer.echo(f"  no preemption: {plan['reason']}")


def register(app: typer.Typer) -> None:
    """Add this area's commands to app."""
    for command in (up, allocator, api, submit, status, simulate):
        app.command(epilog=output.EXIT_CODES_HELP)(command)

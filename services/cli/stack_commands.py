"""CLI commands of the stack area: ``up``, ``allocator``, ``submit``, ``status``, ``simulate``.

Output shapes are DESIGN.md's "CLI output contracts"; exit codes 0 success, 2 bad input (with
``{"error", "field"}`` on stdout under ``--json``), 1 anything else (stack unreachable, timeout).
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from events import codec, intents, subjects
from services import podspec
from services.allocator import settings as allocator_settings
from services.allocator import simulation, views
from services.allocator.adapters import database
from services.allocator.adapters.postgres import PostgresEventStore
from services.allocator.adapters.relay import INTENT_HEADER, POSITION_HEADER
from services.allocator.domain.state import ClusterState
from services.cli import endpoints, stack
from services.cli.output import BadInput, fail
from services.shared import lifecycle, logs, messaging
from services.shared.settings import DATABASE_URL_ENV, SettingsError

console = Console()
err_console = Console(stderr=True)

DataDirOption = typer.Option(None, "--data-dir", help="Data dir of `gpuledger up` (reads endpoints.json).")
JsonOption = typer.Option(False, "--json", help="Print JSON (DESIGN.md shapes).")


def _guard(as_json: bool, action: Any) -> Any:
    """Run ``action()``: bad input exits 2, any other failure exits 1, with the error shown."""
    try:
        return action()
    except (BadInput, endpoints.EndpointsError, podspec.PodSpecError, SettingsError) as exc:
        fail(str(exc), field=getattr(exc, "field", ""), code=2, as_json=as_json)
    except typer.Exit:
        raise
    except Exception as exc:
        fail(str(exc) or repr(exc), field="", code=1, as_json=as_json)


def read_pod(path: Path) -> dict[str, Any]:
    """The first YAML/JSON document of ``path`` as a dict; raises BadInput naming the file."""
    try:
        document = next(iter(yaml.safe_load_all(path.read_text())), None)
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}", field="POD") from exc
    except yaml.YAMLError as exc:
        raise BadInput(f"{path} is not YAML: {exc}", field="POD") from exc
    if not isinstance(document, dict):
        raise BadInput(f"{path} does not hold a Pod object", field="POD")
    return document


def compose(pod: dict[str, Any]) -> Any:
    """The pod's AllocationSpec (a fresh UID when the manifest has none); raises PodSpecError."""
    return podspec.compose(pod, context=podspec.ComposeContext(review_uid=str(uuid.uuid4())))


async def load_state(database_url: str) -> ClusterState:
    """The projection as of now: newest snapshot + replay from the log at ``database_url``."""
    if not database_url:
        raise BadInput("no database URL: pass --data-dir or set GPULEDGER_DATABASE_URL", field="data_dir")
    pool = await database.create_pool(database_url, max_size=1)
    try:
        return await PostgresEventStore(pool).load_state()
    finally:
        await pool.close()


async def submit_and_wait(nats_url: str, spec: Any, *, timeout_s: float) -> dict[str, Any]:
    """Publish RequestAllocation for ``spec`` and return its outcome event's view (with position)."""
    client = await messaging.connect(nats_url, name="gpuledger-submit")
    try:
        sub = await client.subscribe(f"{subjects.EVENT_SUBJECT_PREFIX}.>")
        intent = intents.RequestAllocation(intent_id=f"submit-{uuid.uuid4()}", spec=spec)
        await messaging.publish_intent(client.jetstream(), intent)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            try:
                msg = await sub.next_msg(timeout=left)
            except TimeoutError:
                break
            headers = msg.headers or {}
            if headers.get(INTENT_HEADER) != intent.intent_id:
                continue
            event = codec.decode_event(msg.data)
            if views.is_outcome_of(event, spec.allocation_id) or codec.tag_of(event) == "intent_rejected":
                return views.outcome_view(event, position=int(headers.get(POSITION_HEADER, "0")))
        raise TimeoutError(f"no decision for {intent.intent_id} within {timeout_s}s (is the allocator up?)")
    finally:
        await client.close()


def _print_outcome(view: dict[str, Any]) -> None:
    console.print(f"{view['type']}: {view['namespace']}/{view['pod']} (allocation {view['allocation_id']})")
    if view["node"]:
        console.print(f"  node {view['node']}, GPUs {', '.join(view['gpus'])}")
    if view["reason"]:
        console.print(f"  reason: {view['reason']}", markup=False)
    if view["position"] is not None:
        console.print(f"  log position {view['position']}")


def _print_status(view: dict[str, Any]) -> None:
    table = Table("pool", "GPUs", "TFLOPS cap", "TFLOPS free", "VRAM cap", "VRAM free", title="pools")
    for pool in view["pools"]:
        cap, free = pool["capacity"], pool["available"]
        table.add_row(pool["name"], str(pool["gpus"]), cap["tflops"], free["tflops"], cap["vram"], free["vram"])
    console.print(table)
    counts = view["allocations"]
    console.print(f"{len(view['nodes'])} nodes, {len(view['gpus'])} GPUs; allocations: "
                  f"{counts['granted']} granted, {counts['queued']} queued; log position {view['position']}")


def up(data_dir: Path = typer.Option(endpoints.DEFAULT_DATA_DIR, "--data-dir", help="State directory."),
       inventory: Path | None = typer.Option(None, "--inventory", help="YAML inventory or node CSV."),
       http_port: int = typer.Option(0, "--http-port", help="Allocator HTTP port (0: any free).")) -> None:
    """Start NATS, PostgreSQL, the allocator and the other services; Ctrl-C stops them."""
    logs.setup("warning")
    if inventory is not None and not inventory.is_file():
        fail(f"inventory file {inventory} not found", field="inventory", code=2, as_json=False)
    options = stack.UpOptions(data_dir=data_dir, inventory=inventory, http_port=http_port)

    async def main(stop: asyncio.Event) -> None:
        await stack.run_up(options, stop, console=console)

    _guard(False, lambda: lifecycle.run_service(main))
    console.print("gpuledger stopped")


def allocator() -> None:
    """Run one allocator replica with settings from GPULEDGER_* variables (until SIGTERM)."""
    from services.allocator import bootstrap

    config = _guard(False, allocator_settings.load)
    if not config.database_url:
        fail(f"{DATABASE_URL_ENV} is not set", field=DATABASE_URL_ENV, code=2, as_json=False)
    logs.setup(config.log_level, json=config.log_json)
    _guard(False, lambda: lifecycle.run_service(functools.partial(bootstrap.serve, config)))


def submit(pod_file: Path = typer.Argument(..., metavar="POD.yaml"),
           timeout: float = typer.Option(30.0, "--timeout", help="Seconds to wait for the decision."),
           data_dir: Path | None = DataDirOption, as_json: bool = JsonOption) -> None:
    """Publish the Pod's allocation request and print the allocator's decision."""
    spec = _guard(as_json, lambda: compose(read_pod(pod_file)))
    found = _guard(as_json, lambda: endpoints.resolve(data_dir))
    view = _guard(as_json, lambda: asyncio.run(submit_and_wait(found.nats_url, spec, timeout_s=timeout)))
    print(json.dumps(view)) if as_json else _print_outcome(view)


def status(data_dir: Path | None = DataDirOption, as_json: bool = JsonOption) -> None:
    """Per pool, node and GPU: capacity, available, allocations (from the log)."""
    found = _guard(as_json, lambda: endpoints.resolve(data_dir))
    state = _guard(as_json, lambda: asyncio.run(load_state(found.database_url)))
    view = views.status_view(state)
    print(json.dumps(view)) if as_json else _print_status(view)


def simulate(pod_file: Path = typer.Argument(..., metavar="POD.yaml"),
             data_dir: Path | None = DataDirOption, as_json: bool = JsonOption) -> None:
    """What the allocator would decide for the Pod now, and why (nothing is written)."""
    pod = _guard(as_json, lambda: read_pod(pod_file))
    found = _guard(as_json, lambda: endpoints.resolve(data_dir))
    state = _guard(as_json, lambda: asyncio.run(load_state(found.database_url)))
    result = _guard(as_json, lambda: simulation.simulate(state, pod))
    if as_json:
        print(json.dumps(result))
        return
    if result["outcome"] is not None:
        _print_outcome(result["outcome"])
    for item in result["filters"]:
        console.print(f"  filter {item['name']}: removed {item['removed']} GPUs")


def register(app: typer.Typer) -> None:
    """Add this area's commands to app."""
    for command in (up, allocator, submit, status, simulate):
        app.command()(command)

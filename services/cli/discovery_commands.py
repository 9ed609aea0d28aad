"""CLI command of the discovery area: ``gpuledger discovery --source kubernetes|nvml|static [--file F]``.

Runs a discovery source and publishes RegisterNode/RemoveNode intents to the stack's NATS
(``--nats-url``, else ``--data-dir``'s endpoints.json, else ``GPULEDGER_NATS_URL``), with
heartbeats every ``--interval`` seconds until interrupted. ``--once`` reports once and exits;
``--print`` writes the intents as JSON lines on stdout instead of publishing (no NATS needed).
Exit codes: 0 ok, 2 bad input (``{"error", "field"}`` under ``--json``), 1 anything else, 141
stdout's reader went away (``--print | head``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from services.cli import endpoints
from services.cli.exits import pipe_closed
from services.cli.output import fail

if TYPE_CHECKING:
    from events.base import Intent
    from services.discovery import settings


def _nats_url(explicit: str | None, data_dir: Path | None, configured: settings.DiscoverySettings) -> str:
    """--nats-url, else --data-dir, else the environment (settings), else the default data dir."""
    from services.discovery import settings
    from services.shared.settings import NATS_URL_ENV, SettingsError

    if explicit:
        return explicit
    if data_dir is None and any(os.environ.get(v) for v in (NATS_URL_ENV, f"{settings.PREFIX}NATS_URL")):
        return configured.nats_url
    try:
        return endpoints.resolve(data_dir).nats_url
    except endpoints.EndpointsError as exc:
        raise SettingsError(f"nats_url: {exc}") from exc


def _field_of(text: str) -> str:
    """The settings field an error message is about (``"...): file: ..."`` or ``"... at `$.file`"``)."""
    import msgspec

    from services.discovery import settings

    names = {f.name for f in msgspec.structs.fields(settings.DiscoverySettings)}
    match = re.search(r"`\$\.(\w+)`", text)
    head = text.rsplit("): ", 1)[-1].split(":", 1)[0].strip()
    if match and match.group(1) in names:
        return match.group(1)
    return head if head in names else "settings"


class _Printer:
    """``--print``'s publish: one JSON line per intent on stdout. When stdout's reader goes away
    (``discovery --print | head``) it sets ``stop`` and remembers it, so the command ends with
    exit 141 like every other command instead of retrying the write at each heartbeat."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop, self.closed = stop, False

    async def __call__(self, intent: Intent) -> None:
        from events import codec

        if self.closed:
            return
        try:
            typer.echo(json.dumps(codec.to_builtins(intent), sort_keys=True))
        except BrokenPipeError:
            self.closed = True
            self.stop.set()


def _summary(inventory: Any, source: str) -> dict[str, Any]:
    reports = inventory.reports()
    return {"source": source, "nodes": len(reports), "gpus": sum(len(r.gpus) for r in reports),
            "models": sorted({g.model for r in reports for g in r.gpus})}


def discovery(
    source: Annotated[str | None, typer.Option("--source", help="kubernetes | nvml | static (default: "
                                                "GPULEDGER_DISCOVERY_SOURCE, else kubernetes)")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="Static inventory: YAML or Alibaba node CSV.")] = None,
    pool: Annotated[str | None, typer.Option("--pool", help="Pool of nodes that name none.")] = None,
    once: Annotated[bool, typer.Option("--once", help="Report once and exit (no heartbeats).")] = False,
    print_only: Annotated[bool, typer.Option("--print", help="Print intents as JSON lines; publish nothing.")]
    = False,
    interval: Annotated[float | None, typer.Option("--interval", help="Heartbeat period, seconds.")] = None,
    nats_url: Annotated[str | None, typer.Option("--nats-url", help="NATS URL (overrides --data-dir).")] = None,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="Data dir of `gpuledger up`.")] = None,
    kube_url: Annotated[str | None, typer.Option("--kube-url", help="Kubernetes API URL.")] = None,
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", help="kubeconfig file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary at the end.")] = False,
) -> None:
    """Discover GPU nodes and publish them to the allocator (RegisterNode intents, then heartbeats)."""
    import msgspec

    from services.discovery import settings, wiring
    from services.discovery.catalog import CatalogError
    from services.discovery.static import InventoryError
    from services.shared import kube, lifecycle, logs
    from services.shared.settings import SettingsError

    try:
        config = settings.load(source=source, file=str(file) if file else None, pool=pool,
                               heartbeat_interval_s=0.0 if once else interval, kube_url=kube_url,
                               kubeconfig=kubeconfig)
        if not print_only:
            config = msgspec.structs.replace(config, nats_url=_nats_url(nats_url, data_dir, config))
    except (SettingsError, msgspec.ValidationError) as exc:
        fail(str(exc), field=_field_of(str(exc)), as_json=as_json)
    logs.setup(config.log_level, json=config.log_json)
    printers: list[_Printer] = []

    async def run(stop: asyncio.Event) -> None:
        printers.append(_Printer(stop))
        inventory = await wiring.run_discovery(config, publish=printers[0] if print_only else None, once=once,
                                               stop=stop)
        if as_json and not print_only:
            typer.echo(json.dumps(_summary(inventory, config.source)))

    try:
        lifecycle.run_service(run)
    except InventoryError as exc:
        fail(str(exc), field="file", as_json=as_json)
    except (CatalogError, kube.KubeConfigError) as exc:
        fail(str(exc), field="models_file" if isinstance(exc, CatalogError) else "kube_url", as_json=as_json)
    except FileNotFoundError as exc:
        fail(f"{exc.filename}: no such file", field="file", as_json=as_json)
    if printers and printers[0].closed:
        pipe_closed()


def register(app: typer.Typer) -> None:
    """Add ``discovery`` to ``app``."""
    app.command("discovery")(discovery)

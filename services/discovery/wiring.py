"""Composition root of the discovery service: settings -> model table -> source -> publisher -> heartbeats.

``run_discovery(settings)`` connects to NATS (unless a ``publish`` callable is injected, as tests
and ``--print`` do), reports every node of the configured source once, then keeps reporting:
the Kubernetes watch publishes changes as they happen, the NVML agent re-reads its devices,
and every source re-sends its current reports each ``heartbeat_interval_s`` until ``stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import structlog

from events.intents import RegisterNode
from services.discovery import kubernetes, nvml
from services.discovery.catalog import ModelTable
from services.discovery.heartbeat import Inventory, Publish, heartbeat_loop
from services.discovery.inventory import ReportConfig, same_report
from services.discovery.settings import DiscoverySettings
from services.discovery.static import load_inventory
from services.shared import kube, lifecycle, messaging

log = structlog.get_logger(__name__)

Refresh = Callable[[], Awaitable[None]]


async def _nats_error(exc: Exception) -> None:
    """One log line per NATS connection error (nats-py would print a traceback; it keeps retrying)."""
    log.warning("NATS connection error; retrying", error=repr(exc))


async def _connect(settings: DiscoverySettings, stop: asyncio.Event) -> Any:
    """Connect to NATS (retrying while it is down); None when ``stop`` is set first."""
    connecting = asyncio.ensure_future(messaging.connect(
        settings.nats_url, name=f"gpuledger-discovery-{settings.source}", error_cb=_nats_error))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([connecting, stopping], return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if connecting.done():
        return connecting.result()
    connecting.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await connecting
    return None


async def _nats_publisher(settings: DiscoverySettings, *, stop: asyncio.Event,
                          stack: AsyncExitStack) -> Publish | None:
    """Publish through JetStream (streams ensured; drained on exit); None when stopped before connecting."""
    nc = await _connect(settings, stop)
    if nc is None:
        return None
    stack.push_async_callback(nc.drain)
    js = nc.jetstream()
    await messaging.ensure_streams(js)
    return functools.partial(messaging.publish_intent, js)


async def _put(inventory: Inventory, publish: Publish, report: RegisterNode) -> None:
    previous = inventory.get(report.node)
    inventory.put(report)
    if previous is None or not same_report(previous, report):
        await publish(report)


def nvml_refresh(settings: DiscoverySettings, *, inventory: Inventory, publish: Publish, table: ModelTable,
                 config: ReportConfig, module: object | None = None) -> Refresh:
    """A coroutine function that re-reads NVML and publishes the node's report when it changed."""
    async def refresh() -> None:
        readings = await asyncio.to_thread(nvml.read_devices, module or nvml.load_nvml())
        cpu, memory = nvml.host_resources()
        report = nvml.node_report(settings.node_name or nvml.node_name(), readings, table=table,
                                  config=config, cpu_milli=cpu, memory_bytes=memory)
        await _put(inventory, publish, report)
    return refresh


async def _kubernetes(settings: DiscoverySettings, *, inventory: Inventory, publish: Publish,
                      table: ModelTable, config: ReportConfig, once: bool) -> None:
    api = await kube.api_client(url=settings.kube_url, kubeconfig=settings.kubeconfig,
                                context=settings.kube_context)
    async with api:
        if once:
            await kubernetes.report_nodes(api, inventory=inventory, publish=publish, table=table, config=config,
                                          label_selector=settings.node_selector)
            return
        await kubernetes.watch_nodes(api, inventory=inventory, publish=publish, table=table, config=config,
                                     label_selector=settings.node_selector,
                                     timeout_s=settings.watch_timeout_s)


async def run_discovery(settings: DiscoverySettings, *, publish: Publish | None = None, once: bool = False,
                        stop: asyncio.Event | None = None, nvml_module: object | None = None) -> Inventory:
    """Run the configured source; returns its final Inventory (after ``once``, or when ``stop`` is set).

    Raises static.InventoryError / catalog.CatalogError / kube.KubeConfigError for bad configuration.
    """
    table = ModelTable.load(settings.models_file)
    config = settings.report_config()
    inventory = Inventory()
    stop = stop or asyncio.Event()
    async with AsyncExitStack() as stack:
        publish = publish or await _nats_publisher(settings, stop=stop, stack=stack)
        if publish is None:
            return inventory
        refresh: Refresh | None = None
        if settings.source == "static":
            for report in load_inventory(settings.file, pool=settings.pool, table=table, config=config):
                await _put(inventory, publish, report)
        elif settings.source == "nvml":
            refresh = nvml_refresh(settings, inventory=inventory, publish=publish, table=table, config=config,
                                   module=nvml_module)
            await refresh()
        log.info("discovery reporting", source=settings.source, nodes=len(inventory.reports()))
        tasks = []
        if settings.source == "kubernetes":
            tasks.append(_kubernetes(settings, inventory=inventory, publish=publish, table=table,
                                     config=config, once=once))
        if not once and settings.heartbeat_interval_s > 0:
            tasks.append(heartbeat_loop(inventory, publish, interval_s=settings.heartbeat_interval_s,
                                        refresh=refresh))
        if once:
            for task in tasks:
                await task
        elif tasks:
            await lifecycle.supervise(stop, *tasks)
    return inventory

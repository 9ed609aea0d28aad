"""The autoscaler inside ``gpuledger up``: ``run(stop, endpoints=..., ready=...)``.

The stack (services/cli/stack.py, OPTIONAL_SERVICES) awaits ``ready`` for extra URLs (none
here: ``gpuledger recommend`` reaches the autoscaler over NATS request/reply) and cancels or
stops the task with ``stop``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.autoscaler.settings import AutoscalerSettings
from services.autoscaler.wiring import AutoscalerRuntime, run_autoscaler
from services.shared import settings as shared_settings


async def run(stop: asyncio.Event, *, endpoints: Any, ready: asyncio.Future[dict[str, str]]) -> None:
    """Run the autoscaler against the stack's NATS until ``stop``; resolves ``ready`` with ``{}``."""
    config = shared_settings.load(AutoscalerSettings, nats_url=getattr(endpoints, "nats_url", None) or None)

    def on_ready(_: AutoscalerRuntime) -> None:
        if not ready.done():
            ready.set_result({})

    try:
        await run_autoscaler(config, stop, on_ready=on_ready)
    except BaseException as exc:
        if not ready.done():
            ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
        raise

"""Running the autoscaler service inside a test, with fast settings."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from services.autoscaler.settings import AutoscalerSettings
from services.autoscaler.wiring import AutoscalerRuntime, run_autoscaler

FAST = {"autoscaler_tick_s": 0.05, "autoscaler_interval_s": 0.2, "autoscaler_checkpoint_every_s": 0.2,
        "autoscaler_catch_up_timeout_s": 10.0}


class RunningAutoscaler:
    """An autoscaler task; ``stop()`` ends it (checkpoints are saved on the way out)."""

    def __init__(self, task: asyncio.Task[None], stop: asyncio.Event, runtime: AutoscalerRuntime) -> None:
        self.task, self._stop, self.runtime = task, stop, runtime

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.wait_for(self.task, 30)


async def start_autoscaler(nats_url: str, **overrides: Any) -> RunningAutoscaler:
    """Start ``run_autoscaler`` and wait until it has replayed the event log."""
    settings = msgspec.convert({**FAST, "nats_url": nats_url, **overrides}, AutoscalerSettings)
    stop = asyncio.Event()
    ready: asyncio.Future[AutoscalerRuntime] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run_autoscaler(settings, stop, on_ready=ready.set_result))
    done, _ = await asyncio.wait([task, ready], timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()
    return RunningAutoscaler(task, stop, ready.result())

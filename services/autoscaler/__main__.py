"""``python -m services.autoscaler``: settings from GPULEDGER_* variables -> run_autoscaler until SIGTERM."""

from __future__ import annotations

import asyncio

from services.autoscaler.settings import AutoscalerSettings
from services.autoscaler.wiring import run_autoscaler
from services.shared import lifecycle, logs
from services.shared import settings as shared_settings


def main() -> None:
    """Run the autoscaler (the container entry point; ``gpuledger autoscaler`` does the same)."""
    config = shared_settings.load(AutoscalerSettings)
    logs.setup(config.log_level, json=config.log_json)

    async def run(stop: asyncio.Event) -> None:
        await run_autoscaler(config, stop)

    lifecycle.run_service(run)


if __name__ == "__main__":
    main()

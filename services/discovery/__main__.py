"""``python -m services.discovery``: settings from the environment -> run_discovery until SIGTERM."""

from __future__ import annotations

import asyncio

from services.discovery import settings, wiring
from services.shared import lifecycle, logs


def main() -> None:
    """Run the discovery source named by ``GPULEDGER_DISCOVERY_SOURCE`` (default kubernetes)."""
    config = settings.load()
    logs.setup(config.log_level, json=config.log_json)

    async def run(stop: asyncio.Event) -> None:
        await wiring.run_discovery(config, stop=stop)

    lifecycle.run_service(run)


if __name__ == "__main__":
    main()

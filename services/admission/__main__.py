"""``python -m services.admission``: settings from the environment -> run_admission until SIGTERM."""

from __future__ import annotations

import asyncio

from services.admission.settings import load_settings
from services.admission.wiring import run_admission
from services.shared import lifecycle


def main() -> None:
    """Serve the webhook, watches and binder (GPULEDGER_ADMISSION_* settings)."""
    settings = load_settings()

    async def run(stop: asyncio.Event) -> None:
        await run_admission(settings, stop=stop)

    lifecycle.run_service(run)


if __name__ == "__main__":
    main()

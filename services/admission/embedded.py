"""The admission webhook inside ``gpuledger up``: ``run(stop, endpoints=..., ready=...)``.

The stack (services/cli/stack.py, OPTIONAL_SERVICES) awaits ``ready`` for
``{"webhook_https": URL}`` and sets ``stop`` to end it. No Kubernetes runs there, so the watches
and the binder are off; a self-signed pair is generated under ``GPULEDGER_ADMISSION_CERT_DIR`` or a
temporary directory, on a free port unless ``GPULEDGER_ADMISSION_PORT`` is set.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from services.admission.settings import load_settings
from services.admission.wiring import run_admission


async def run(stop: asyncio.Event, *, endpoints: Any, ready: asyncio.Future[dict[str, str]]) -> None:
    """Serve the webhook on the stack's NATS until ``stop`` is set."""
    port = None if "GPULEDGER_ADMISSION_PORT" in os.environ else 0
    settings = load_settings(nats_url=getattr(endpoints, "nats_url", None) or None, kube=False, port=port)

    def on_ready(url: str) -> None:
        if not ready.done():
            ready.set_result({"webhook_https": url})

    try:
        await run_admission(settings, on_ready=on_ready, stop=stop)
    except BaseException as exc:
        if not ready.done():
            ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
        raise

"""The admission webhook inside ``gpuledger up``: ``run(stop, endpoints=..., ready=...)``.

The stack (services/cli/stack.py, OPTIONAL_SERVICES) awaits ``ready`` for
``{"webhook_https": URL}`` and sets ``stop`` to end it. No Kubernetes runs there, so the watches
and the binder are off; a self-signed pair is generated under ``GPULEDGER_ADMISSION_CERT_DIR`` or a
temporary directory, on a free port unless ``GPULEDGER_ADMISSION_PORT`` is set.

Every review must carry ``Authorization: Bearer <token>``: the stack's API token (``endpoints.api_token``,
else ``GPULEDGER_API_TOKEN`` or the file ``GPULEDGER_API_TOKEN_FILE`` names), unless
``GPULEDGER_ADMISSION_WEBHOOK_TOKEN`` sets another. Without any token the webhook does not start
(``up`` logs it and goes on without it): it never serves reviews unauthenticated.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from services.admission.settings import load_settings
from services.admission.wiring import run_admission
from services.shared.settings import SettingsError

API_TOKEN_ENV = "GPULEDGER_API_TOKEN"
API_TOKEN_FILE_ENV = "GPULEDGER_API_TOKEN_FILE"


def stack_token(endpoints: Any, environ: dict[str, str] | None = None) -> str:
    """The stack's API token: ``endpoints.api_token``, else ``GPULEDGER_API_TOKEN``, else the
    content of the file ``GPULEDGER_API_TOKEN_FILE`` names ("" when none); SettingsError naming
    the variable when that file cannot be read."""
    env = dict(os.environ) if environ is None else environ
    token = str(getattr(endpoints, "api_token", "") or env.get(API_TOKEN_ENV, ""))
    if token or not env.get(API_TOKEN_FILE_ENV):
        return token
    try:
        return Path(env[API_TOKEN_FILE_ENV]).read_text().strip()
    except OSError as exc:
        raise SettingsError(f"{API_TOKEN_FILE_ENV}={env[API_TOKEN_FILE_ENV]}: {exc.strerror}") from None


async def run(stop: asyncio.Event, *, endpoints: Any, ready: asyncio.Future[dict[str, str]]) -> None:
    """Serve the webhook on the stack's NATS until ``stop`` is set; raises SettingsError (through
    ``ready``) when no token is configured."""
    try:
        port = None if "GPULEDGER_ADMISSION_PORT" in os.environ else 0
        settings = load_settings(nats_url=getattr(endpoints, "nats_url", None) or None, kube=False, port=port)
        settings.webhook_token = settings.webhook_token or stack_token(endpoints)
        if not settings.webhook_token:
            raise SettingsError(f"the webhook needs a bearer token and none is set: set {API_TOKEN_ENV} "
                                "(or GPULEDGER_ADMISSION_WEBHOOK_TOKEN); it is not served without one")

        def on_ready(url: str) -> None:
            if not ready.done():
                ready.set_result({"webhook_https": url})

        await run_admission(settings, on_ready=on_ready, stop=stop)
    except BaseException as exc:
        if not ready.done():
            ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
        raise

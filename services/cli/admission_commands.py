"""CLI commands of the admission area: ``gpuledger admission`` serves the mutating webhook.

Without ``--cert-file``/``--key-file`` a self-signed pair is generated (into ``--cert-dir``) and
its path printed, ready to paste as ``caBundle``. Exit codes: 2 for bad settings, 1 otherwise.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer


def admission(
    host: str = typer.Option(None, help="Listen address (GPULEDGER_ADMISSION_HOST, default 127.0.0.1)."),
    port: int = typer.Option(None, help="HTTPS port (GPULEDGER_ADMISSION_PORT, default 9443; 0 = any free)."),
    cert_file: Path = typer.Option(None, help="PEM certificate; omit both files to self-sign."),
    key_file: Path = typer.Option(None, help="PEM private key."),
    cert_dir: Path = typer.Option(None, help="Where a generated self-signed pair is written."),
    nats_url: str = typer.Option(None, help="NATS URL (GPULEDGER_NATS_URL)."),
    failure_policy: str = typer.Option(None, help="When NATS is down: deny (default) or ignore."),
    kube: bool = typer.Option(None, "--kube/--no-kube", help="Run the watches and binder (needs a cluster)."),
    kubeconfig: str = typer.Option(None, help="Kubeconfig path (default: KUBECONFIG, ~/.kube, in-cluster)."),
    namespace: str = typer.Option(None, help="Only this namespace (default: all)."),
    allocator_url: str = typer.Option(None, help="Allocator HTTP API whose quota status is written into "
                                      "GPUResourceQuotas (GPULEDGER_ADMISSION_ALLOCATOR_URL; default: none)."),
    as_json: bool = typer.Option(False, "--json", help="Print the ready line as JSON."),
) -> None:
    """Serve the TensorFusion-compatible mutating webhook (POST /mutate-v1-pod) and the binder."""
    from services.admission.settings import load_settings
    from services.admission.wiring import run_admission
    from services.shared import lifecycle
    from services.shared.settings import SettingsError

    try:
        settings = load_settings(
            host=host,
            port=port,
            cert_file=str(cert_file) if cert_file else None,
            key_file=str(key_file) if key_file else None,
            cert_dir=str(cert_dir) if cert_dir else None,
            nats_url=nats_url,
            failure_policy=failure_policy,
            kube=kube,
            kubeconfig=kubeconfig,
            namespace=namespace,
            allocator_url=allocator_url,
        )
    except SettingsError as exc:
        typer.echo(json.dumps({"error": str(exc), "field": "settings"}) if as_json else f"error: {exc}")
        raise typer.Exit(2) from None

    def on_ready(url: str) -> None:
        message = {"webhook_https": f"{url}/mutate-v1-pod"}
        typer.echo(json.dumps(message) if as_json else f"gpuledger admission webhook on {message['webhook_https']}")

    async def run(stop: asyncio.Event) -> None:
        await run_admission(settings, on_ready=on_ready, stop=stop)

    lifecycle.run_service(run)


def register(app: typer.Typer) -> None:
    """Add ``gpuledger admission`` to ``app``."""
    app.command(name="admission")(admission)

"""AdmissionSettings: the webhook, binder and watch settings, read once from the environment.

Variables: ``GPULEDGER_NATS_URL`` and ``GPULEDGER_ADMISSION_<FIELD>`` (e.g.
``GPULEDGER_ADMISSION_FAILURE_POLICY=ignore``); a bad value raises SettingsError naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import msgspec

from services.shared import settings as shared_settings

FAILURE_POLICIES = ("deny", "ignore")


class AdmissionSettings(msgspec.Struct, kw_only=True):
    """Settings of ``gpuledger admission`` (defaults suit a local run)."""

    nats_url: str = "nats://127.0.0.1:4222"
    host: str = "127.0.0.1"
    port: int = 9443
    cert_file: str = ""
    """PEM certificate; with ``key_file`` empty a self-signed pair is generated into ``cert_dir``."""
    key_file: str = ""
    cert_dir: str = ""
    failure_policy: str = "deny"
    """What to answer when NATS cannot take the RequestAllocation: ``deny`` (default) or ``ignore``
    (admit the pod unmutated, outside gpuledger)."""
    publish_timeout_s: float = 2.0
    default_pool: str = "default"
    default_qos: str = "medium"
    default_local_gpu: bool = True
    kube: bool = True
    """Run the Kubernetes side (watches, binder); off for a webhook-only local run."""
    kubeconfig: str = ""
    namespace: str = ""
    """Namespace to watch ("" = all namespaces)."""
    allocator_url: str = ""
    """Base URL of the HTTP API, served by the readers (``http://gpuledger-api:8480``); when set (and
    ``kube``), GPUResourceQuota status is written from its quota status (services.admission.quota_sync)
    and GPUShare status from its share figures (services.admission.share_status)."""
    api_token: str = ""
    """Bearer token of the allocator's HTTP API, when it requires one."""
    quota_status_period_s: float = 10.0
    """Seconds between two status rounds of the GPUResourceQuota and GPUShare status writers."""
    webhook_token: str = ""
    """Bearer token every AdmissionReview must carry ("" = none; the API server sends it from its
    AdmissionConfiguration kubeconfig, docs/kubernetes.md)."""
    webhook_token_file: str = ""
    """File holding ``webhook_token`` (a mounted Secret); read once at start."""
    client_ca_file: str = ""
    """PEM CA bundle: when set, the webhook's TLS requires a client certificate it signed (the API
    server's, from the same kubeconfig)."""


def load_settings(environ: Mapping[str, str] | None = None, **overrides: object) -> AdmissionSettings:
    """Defaults, then environment, then ``overrides``; raises SettingsError on a bad value."""
    loaded = shared_settings.load(AdmissionSettings, prefix="GPULEDGER_ADMISSION_", environ=environ, **overrides)
    env = environ if environ is not None else __import__("os").environ
    if "nats_url" not in overrides and shared_settings.NATS_URL_ENV in env:
        loaded.nats_url = env[shared_settings.NATS_URL_ENV]
    if loaded.webhook_token_file:
        if loaded.webhook_token:
            raise shared_settings.SettingsError(
                "GPULEDGER_ADMISSION_WEBHOOK_TOKEN and GPULEDGER_ADMISSION_WEBHOOK_TOKEN_FILE are both set; set one")
        try:
            loaded.webhook_token = Path(loaded.webhook_token_file).read_text().strip()
        except OSError as exc:
            raise shared_settings.SettingsError(
                f"GPULEDGER_ADMISSION_WEBHOOK_TOKEN_FILE={loaded.webhook_token_file}: {exc.strerror}") from None
        if not loaded.webhook_token:
            raise shared_settings.SettingsError(
                f"GPULEDGER_ADMISSION_WEBHOOK_TOKEN_FILE={loaded.webhook_token_file}: the file is empty")
    if loaded.failure_policy not in FAILURE_POLICIES:
        raise shared_settings.SettingsError(
            f"GPULEDGER_ADMISSION_FAILURE_POLICY={loaded.failure_policy!r}: must be one of {FAILURE_POLICIES}"
        )
    return loaded

"""DiscoverySettings: every tunable of the discovery service, read once from the environment.

Field ``foo`` reads ``GPULEDGER_DISCOVERY_FOO``; ``nats_url`` also falls back to the shared
``GPULEDGER_NATS_URL``. Quantities are Kubernetes strings (``"100"`` TFLOPS, ``"16Gi"``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import msgspec

from events import quantity
from services.discovery.catalog import MODELS_FILE
from services.discovery.inventory import ReportConfig
from services.shared import settings as shared_settings

SOURCES = ("kubernetes", "nvml", "static")
PREFIX = "GPULEDGER_DISCOVERY_"


class DiscoverySettings(msgspec.Struct, kw_only=True):
    """Discovery settings (``_s``: seconds).

    - ``source``: ``kubernetes`` | ``nvml`` | ``static``; ``file``: the static inventory (YAML or CSV).
    - ``nats_url``: where intents go.
    - ``pool``: pool of nodes that name none; ``pool_label``: node label naming the pool (kubernetes).
    - ``node_selector``: label selector restricting the watched Nodes (kubernetes).
    - ``heartbeat_interval_s``: re-report period (0: report once, no heartbeats).
    - ``heartbeat_ttl_s``: TTL written into reports (0: 3 x interval; ignored without heartbeats).
    - ``models_file``: the GPU model table; ``default_tflops``/``default_vram``: unknown-model capacity.
    - ``kube_url``/``kubeconfig``/``kube_context``: how to reach the API (else in-cluster).
    - ``watch_timeout_s``: server-side timeout of one watch request (then resumed).
    - ``node_name``: the nvml agent's node (else ``NODE_NAME``, else the hostname).
    """

    source: str = "kubernetes"
    file: str = ""
    nats_url: str = "nats://127.0.0.1:4222"
    pool: str = "default"
    pool_label: str = "gpuledger.io/pool"
    node_selector: str = ""
    heartbeat_interval_s: float = 30.0
    heartbeat_ttl_s: float = 0.0
    models_file: str = str(MODELS_FILE)
    default_tflops: str = "100"
    default_vram: str = "16Gi"
    kube_url: str = ""
    kubeconfig: str = ""
    kube_context: str = ""
    watch_timeout_s: int = 300
    node_name: str = ""
    log_level: str = "info"
    log_json: bool = False

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise msgspec.ValidationError(f"source: {self.source!r} is not one of {', '.join(SOURCES)}")
        if self.source == "static" and not self.file:
            raise msgspec.ValidationError("file: the static source needs an inventory file")
        if self.heartbeat_interval_s < 0 or self.heartbeat_ttl_s < 0:
            raise msgspec.ValidationError("heartbeat_interval_s and heartbeat_ttl_s must be >= 0")
        for name in ("default_tflops", "default_vram"):
            try:
                quantity.parse(getattr(self, name))
            except quantity.QuantityError as exc:
                raise msgspec.ValidationError(f"{name}: {exc}") from None

    def report_config(self) -> ReportConfig:
        """The ReportConfig the sources use (TTL resolved: explicit, else 3 x interval, else 0)."""
        ttl = self.heartbeat_ttl_s or 3 * self.heartbeat_interval_s
        return ReportConfig(
            pool=self.pool, pool_label=self.pool_label, source=self.source,
            default_milli_tflops=quantity.to_milli(self.default_tflops),
            default_vram_bytes=quantity.to_value(self.default_vram),
            heartbeat_ttl_s=ttl if self.heartbeat_interval_s > 0 else 0.0)


def load(*, environ: Mapping[str, str] | None = None, **overrides: object) -> DiscoverySettings:
    """Defaults < ``GPULEDGER_NATS_URL`` < ``GPULEDGER_DISCOVERY_*`` < ``overrides`` (None ignored).

    Raises services.shared.settings.SettingsError naming the bad variable or field.
    """
    env = os.environ if environ is None else environ
    shared = {"nats_url": env.get(shared_settings.NATS_URL_ENV)}
    values = {k: v for k, v in {**shared, **overrides}.items() if v is not None}
    if shared["nats_url"] and f"{PREFIX}NATS_URL" in env and "nats_url" not in overrides:
        values.pop("nats_url")
    return shared_settings.load(DiscoverySettings, prefix=PREFIX, environ=env, **values)

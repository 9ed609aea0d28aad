"""AutoscalerSettings: every tunable of the autoscaler service, read once from ``GPULEDGER_*``.

Field ``foo`` reads ``GPULEDGER_FOO`` (services.shared.settings.load), e.g.
``GPULEDGER_AUTOSCALER_INTERVAL_S``, ``GPULEDGER_AUTOSCALER_PROMETHEUS_URL``.
"""

from __future__ import annotations

from datetime import tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec

DEFAULT_TFLOPS_QUERY = 'max by (namespace, pod) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!=""})'
"""DCGM graphics-engine activity (0..1) per pod; multiplied by the pod's GPU TFLOPS capacity."""
DEFAULT_VRAM_QUERY = 'max by (namespace, pod) (DCGM_FI_DEV_FB_USED{pod!=""}) * 1048576'
"""DCGM framebuffer used (MiB) per pod, as bytes."""


class AutoscalerSettings(msgspec.Struct, kw_only=True):
    """Autoscaler settings (``_s`` = seconds).

    - ``nats_url``: NATS server (``GPULEDGER_NATS_URL``).
    - ``autoscaler_interval_s``: default evaluation period per workload (TensorFusion
      ``autoScalingInterval``, 30 s); a workload's ``autoSetResources.interval`` overrides it.
    - ``autoscaler_tick_s``: how often the loop looks for due workloads.
    - ``autoscaler_max_retries``: capped retries after a ResizeRejected (>= 0).
    - ``autoscaler_retry_after_s``: a worker whose retries are spent waits this long for the same target.
    - ``autoscaler_timezone``: zone of cron rules without ``TZ=`` (IANA name; upstream: the operator's).
    - ``autoscaler_tensorfusion_vram_timing``: reproduce TensorFusion's VRAM peak timing quirk.
    - ``autoscaler_checkpoint_bucket``/``autoscaler_checkpoint_every_s``: NATS KV bucket of the
      histogram checkpoints, and how often changed workloads are saved (also at shutdown).
    - ``autoscaler_checkpoint_nats_user``: the NATS user that owns the bucket, logged in with the
      service's password on a second connection ("" = the service's own connection; deploy/:
      ``autoscaler_checkpoints``, whose account holds only the bucket, docs/security.md).
    - ``autoscaler_prometheus_url``: Prometheus base URL; empty disables the Prometheus source.
    - ``autoscaler_prometheus_tflops_query``/``_vram_query``: PromQL giving per (namespace, pod)
      the compute fraction (0..1) and the VRAM bytes; ``autoscaler_prometheus_interval_s`` the poll period.
    - ``autoscaler_catch_up_timeout_s``: how long start-up waits to replay the event log.
    - ``autoscaler_secrets_dir``: where Secrets named by ``externalScaler.apiKeySecretRef`` are
      mounted (``<dir>/<name>/apiKey``); empty: no bearer token is sent.
    """

    nats_url: str = "nats://127.0.0.1:4222"
    autoscaler_interval_s: float = 30.0
    autoscaler_tick_s: float = 1.0
    autoscaler_max_retries: int = 2
    autoscaler_retry_after_s: float = 300.0
    autoscaler_timezone: str = "UTC"
    autoscaler_tensorfusion_vram_timing: bool = False
    autoscaler_checkpoint_bucket: str = "gpuledger_autoscaler"
    autoscaler_checkpoint_every_s: float = 60.0
    autoscaler_checkpoint_nats_user: str = ""
    autoscaler_prometheus_url: str = ""
    autoscaler_prometheus_tflops_query: str = DEFAULT_TFLOPS_QUERY
    autoscaler_prometheus_vram_query: str = DEFAULT_VRAM_QUERY
    autoscaler_prometheus_interval_s: float = 60.0
    autoscaler_catch_up_timeout_s: float = 30.0
    autoscaler_secrets_dir: str = ""
    log_level: str = "info"
    log_json: bool = False

    def __post_init__(self) -> None:
        if self.autoscaler_interval_s <= 0 or self.autoscaler_tick_s <= 0:
            raise msgspec.ValidationError("autoscaler_interval_s and autoscaler_tick_s must be > 0")
        if self.autoscaler_max_retries < 0:
            raise msgspec.ValidationError(f"autoscaler_max_retries must be >= 0, got {self.autoscaler_max_retries}")
        self.zone()

    def zone(self) -> tzinfo:
        """The cron default zone; raises ValidationError naming an unknown zone."""
        try:
            return ZoneInfo(self.autoscaler_timezone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise msgspec.ValidationError(f"autoscaler_timezone: unknown zone {self.autoscaler_timezone!r}") from exc

"""Per-namespace quota gauges read from the projection at scrape time (a prometheus-client collector).

For every namespace with a quota (TensorFusion GPUResourceQuota status, computed by
:mod:`services.allocator.api.quota_status`): ``gpuledger_quota_available_percent{namespace,resource}``
(0..100, ``resource`` one of requests.tflops, requests.vram, limits.tflops, limits.vram, workers;
100 for an unbounded one), ``gpuledger_quota_alert{namespace}`` (1 when a resource reached the
alert threshold, the condition Ready=False ``AlertThresholdReached``; else 0),
``gpuledger_quota_alert_threshold_percent{namespace}``, ``gpuledger_quota_used_tflops{namespace,side}``
and ``gpuledger_quota_used_vram_bytes{namespace,side}`` (``side`` requests or limits: Σ per-GPU
amount x GPU count) and ``gpuledger_quota_workers{namespace}`` (granted allocations). Cost per
scrape: one pass over the namespaces with a quota.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily

from services.allocator.api.gauges import ProjectionCollector
from services.allocator.api.quota_status import DIMENSIONS, quota_status
from services.allocator.domain.model import QuotaUsage


class QuotaCollector(ProjectionCollector):
    """Yields the quota gauges of the projection ``state()`` returns (read at each scrape)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The quota gauge families of the projection now."""
        state = self._state()
        available = GaugeMetricFamily("gpuledger_quota_available_percent", "Percent of a namespace's quota "
                                      "still available, per resource", labels=["namespace", "resource"])
        alert = GaugeMetricFamily("gpuledger_quota_alert", "1 when a resource of the namespace's quota is past "
                                  "its alert threshold", labels=["namespace"])
        threshold = GaugeMetricFamily("gpuledger_quota_alert_threshold_percent", "The quota's "
                                      "alertThresholdPercent", labels=["namespace"])
        tflops = GaugeMetricFamily("gpuledger_quota_used_tflops", "TFLOPS counted against the quota",
                                   labels=["namespace", "side"])
        vram = GaugeMetricFamily("gpuledger_quota_used_vram_bytes", "VRAM counted against the quota",
                                 labels=["namespace", "side"])
        workers = GaugeMetricFamily("gpuledger_quota_workers", "Granted allocations counted against the quota",
                                    labels=["namespace"])
        for namespace in sorted(state.quotas):
            usage = state.usage.get(namespace) or QuotaUsage()
            status = quota_status(state.quotas[namespace], usage)
            for dimension in DIMENSIONS:
                available.add_metric([namespace, dimension], float(status.available[dimension]))
            alert.add_metric([namespace], 1.0 if status.alert else 0.0)
            threshold.add_metric([namespace], float(status.threshold))
            tflops.add_metric([namespace, "requests"], usage.requests_milli_tflops / 1000)
            tflops.add_metric([namespace, "limits"], usage.limits_milli_tflops / 1000)
            vram.add_metric([namespace, "requests"], float(usage.requests_vram_bytes))
            vram.add_metric([namespace, "limits"], float(usage.limits_vram_bytes))
            workers.add_metric([namespace], float(usage.workers))
        yield from (available, alert, threshold, tflops, vram, workers)

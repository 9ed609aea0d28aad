"""Per-share gauges read from the projection at scrape time (a prometheus-client collector).

For every share and every pool it takes part in (services.allocator.api.share_status; docs/shares.md
defines each figure), labels ``share`` and ``pool``:
``gpuledger_share_{guaranteed,used,borrowed,lent,fair}_tflops`` (TFLOPS),
``gpuledger_share_{guaranteed,used,borrowed,lent,fair}_vram_bytes`` (bytes) and
``gpuledger_share_{guaranteed,used,borrowed,lent,fair}_gpus`` (GPUs; fair may be fractional), and
``gpuledger_share_waiting`` (the share's queued requests in the pool). No sample without shares.
Cost per scrape: one pass over the live allocations and GPUs of the pools with shares.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily

from services.allocator.api.gauges import ProjectionCollector
from services.allocator.api.share_status import all_figures

FIGURES = (("guaranteed", "guaranteed to"), ("used", "used by"), ("borrowed", "borrowed (granted beyond the "
           "guarantee) by"), ("lent", "of the unused guarantee lent to others by"), ("fair", "the fair share of"))
"""The figure of each family and how its help text names it."""
UNITS = (("tflops", "TFLOPS", 1000.0), ("vram_bytes", "VRAM bytes", 1.0), ("gpus", "GPUs", 1.0))
"""Each resource: the name's suffix, its words, and the divisor from the figure's unit (milli-TFLOPS)."""


class ShareCollector(ProjectionCollector):
    """Yields the share gauges of the projection ``state()`` returns (read at each scrape)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The share gauge families of the projection now."""
        figures = [f for found in all_figures(self._state()).values() for f in found]
        for figure, words in FIGURES:
            for index, (suffix, unit, divisor) in enumerate(UNITS):
                family = GaugeMetricFamily(f"gpuledger_share_{figure}_{suffix}", f"{unit} {words} the share in the "
                                           "pool (docs/shares.md)", labels=["share", "pool"])
                for one in figures:
                    value = getattr(one, figure)[index]
                    family.add_metric([one.share, one.pool], float(value) / divisor)
                yield family
        waiting = GaugeMetricFamily("gpuledger_share_waiting", "Queued requests of the share in the pool",
                                    labels=["share", "pool"])
        for one in figures:
            waiting.add_metric([one.share, one.pool], float(one.waiting))
        yield waiting

"""The what-if plot: GPU and TFLOPS utilisation and waiting requests over the window, one line per
run (baseline first), drawn with matplotlib's Agg backend into a PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from services.allocator.api.whatif.engine import WhatIfReport


def plot(report: WhatIfReport, path: Path) -> Path:
    """Write the PNG of ``report``'s series to ``path`` (hours after the window's start on x);
    returns ``path``. Raises OSError when it cannot be written."""
    fig, (gpu, tflops, waiting) = plt.subplots(3, 1, figsize=(8, 7), dpi=110, sharex=True)
    span = report.runs[0].series[-1][0] if report.runs and report.runs[0].series else 0.0
    scale, unit = (3600.0, "h") if span > 7200 else (60.0, "min") if span > 120 else (1.0, "s")
    for run in report.runs:
        xs = [p[0] / scale for p in run.series]
        style = ({"color": "black", "linewidth": 1.3, "linestyle": "--", "zorder": 5} if run is report.runs[0]
                 else {"linewidth": 1.1})
        gpu.step(xs, [p[1] for p in run.series], where="post", label=run.name, **style)
        tflops.step(xs, [p[2] for p in run.series], where="post", label=run.name, **style)
        waiting.step(xs, [p[3] for p in run.series], where="post", label=run.name, **style)
    gpu.set_ylabel("GPUs in use (%)")
    tflops.set_ylabel("TFLOPS allocated (%)")
    waiting.set_ylabel("waiting requests")
    waiting.set_xlabel(f"{unit} after {report.since:%Y-%m-%d %H:%M} UTC")
    for ax in (gpu, tflops, waiting):
        ax.grid(alpha=0.3)
    gpu.set_ylim(0, 105)
    tflops.set_ylim(0, 105)
    gpu.legend(fontsize=8, loc="lower right")
    gpu.set_title(f"what if: pool {report.pool or '(every pool)'}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

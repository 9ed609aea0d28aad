"""The paper's Fig. 9(a)-style plot: unallocated GPU % against arrived workload %, one line per
strategy (median over seeds), with the ideal line, drawn with matplotlib's Agg backend."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from services.trace.experiment import Result


def plot_curves(results: Sequence[Result], path: Path, *, title: str = "", low: int = 80) -> Path:
    """Write a PNG of each result's median curve from ``low`` % to 130 % arrived; returns ``path``."""
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    xs = list(range(low, 131))
    ax.plot(xs, [max(0, 100 - x) for x in xs], color="grey", linestyle=":", label="ideal")
    for result in results:
        points = [(x, result.curve_median[str(x)]) for x in xs if str(x) in result.curve_median]
        ax.plot([p[0] for p in points], [p[1] for p in points],
                label=f"{result.strategy} ({result.unallocated_pct.get('100', float('nan')):.2f} % at 100)")
    ax.set_xlabel("arrived workload (% of GPU capacity)")
    ax.set_ylabel("unallocated GPU (% of capacity)")
    ax.set_ylim(0, 25)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or (results[0].trace if results else ""))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

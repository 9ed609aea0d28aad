"""The what-if report in words: one column per run (baseline first), the fates that differ, the
fairness check. Human units (percent, GPUs, seconds/minutes/hours); ``--json`` prints the
:class:`~services.allocator.api.whatif.engine.WhatIfReport` itself."""

from __future__ import annotations

from services.allocator.api.whatif.engine import WhatIfReport
from services.allocator.api.whatif.meter import Summary, seconds_text


def _wait(p: dict[str, float]) -> str:
    if not p.get("count"):
        return "-"
    return " / ".join(seconds_text(p[k]) for k in ("p50", "p95", "p99"))


def _rows(summary: Summary) -> list[tuple[str, str]]:
    r = summary.requests
    rows = [
        ("GPU utilisation (time-weighted)", f"{summary.gpu_utilisation_pct:.1f} %"),
        ("TFLOPS utilisation (time-weighted)", f"{summary.tflops_utilisation_pct:.1f} %"),
        ("free GPU stranded (FGD, mean)",
         f"{summary.stranded_gpus:.2f} GPUs = {summary.fragmentation_pct_of_free:.1f} % of free"),
        ("requests granted / queued / rejected", f"{r['granted']} / {r['queued']} / {r['rejected']}"),
        ("still waiting at the end", str(r["waiting_at_end"])),
        ("queue wait p50 / p95 / p99", _wait(summary.wait_s)),
    ]
    rows += [(f"  namespace {ns}", _wait(p)) for ns, p in summary.wait_s_by_namespace.items()]
    rows += [("preemptions", str(summary.preemptions)), ("gang timeouts", str(summary.gang_timeouts))]
    return rows


def render(report: WhatIfReport) -> str:
    """The report as text (lines joined by newlines, no trailing newline)."""
    span = (report.until - report.since).total_seconds()
    lines = [f"what if: pool {report.pool or '(every pool)'}, {report.since:%Y-%m-%d %H:%M:%S} to "
             f"{report.until:%Y-%m-%d %H:%M:%S} UTC ({seconds_text(max(span, 0.0))}), positions "
             f"{report.first_position}-{report.last_position}: {report.intents} intents replayed, "
             f"{report.not_replayed} refused as invalid and not replayed"]
    fair = report.fairness
    lines.append("baseline replay equals the log: yes" if fair.mismatches == 0 else
                 f"baseline replay DIFFERS from the log in {fair.mismatches} intents (the comparison is not fair):")
    lines += [f"  {example}" for example in fair.examples]
    columns = [run.name for run in report.runs]
    table = [_rows(run.summary) for run in report.runs]
    label_width = max(len(label) for label, _ in table[0]) if table[0] else 0
    widths = [max(len(columns[i]), *(len(v) for _, v in table[i])) for i in range(len(columns))]
    lines.append("")
    header = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    lines.append(f"{' ' * label_width}  {header}".rstrip())
    labels = [label for label, _ in table[0]]
    for label in labels:
        values = [dict(t).get(label, "-") for t in table]
        cells = "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True))
        lines.append(f"{label.ljust(label_width)}  {cells}".rstrip())
    for run in report.runs[1:]:
        if run.dropped:
            lines.append(f"{run.name}: {run.dropped} recorded intents dropped (releases or resizes of allocations it "
                         "never held, reports of a node it removed)")
    for comparison in report.comparisons:
        lines.append("")
        if not comparison.differing:
            lines.append(f"{comparison.name}: no request's fate differs from the baseline")
            continue
        lines.append(f"{comparison.name}: {comparison.differing} requests' fates differ"
                     + (f" (first {len(comparison.first)})" if comparison.differing > len(comparison.first) else ""))
        for d in comparison.first:
            lines.append(f"  {d.namespace}/{d.pod}: baseline {d.baseline}; here {d.alternative}")
    return "\n".join(lines)

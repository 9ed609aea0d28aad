"""Benchmark: the ATC'23 table — strategies × openb traces × seeds, unallocated GPU % at 100/110/130.

Appends one JSON line per (trace, strategy, seed) to ``--out`` (resumable: done lines are
skipped), sharded with ``--shard i/n`` so two processes can share the work. Summarise with
``--summary``. Every strategy runs through the domain's ``process`` with a Scheduler, the live
allocator's placement code (``--traces``/``--strategies`` restrict the plan).

    python3 benchmarks/trace_table.py --out benchmarks/results/trace_table.jsonl --shard 0/2
    python3 benchmarks/trace_table.py --out benchmarks/results/trace_table.jsonl --summary
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from services.trace import experiment, openb

TRACES = ("default", "cpu050", "gpushare40", "multigpu20", "gpuspec10")
SCAN = ("fgd", "fgd-strand", "frag-cpu", "best-fit", "random")
INDEXED = ("compact-first", "low-load-first", "node-compact-gpu-low-load")


def plan(seeds: int, indexed_seeds: int) -> list[tuple[str, str, int]]:
    """Work items in priority order: FGD, fgd-strand and frag-cpu everywhere, then best-fit, the
    indexed TensorFusion strategies and random."""
    groups = [("fgd", "fgd-strand", "frag-cpu"), ("best-fit",), INDEXED, ("random",)]
    items = []
    for group in groups:
        count = indexed_seeds if group is INDEXED else seeds
        items += [(t, s, 42 + k) for t in TRACES for s in group for k in range(count)]
    return items


def run_item(trace: str, strategy: str, seed: int) -> dict[str, object]:
    nodes = openb.nodes()
    pods = openb.trace_pods(openb.DATA / f"openb_pod_list_{trace}.csv")
    _, runs = experiment.run(nodes, pods, strategy=strategy, seeds=1, trace=trace, first_seed=seed)
    curve = runs[0].curve()
    return {"trace": trace, "strategy": strategy, "seed": seed,
            "unallocated": {x: round(curve[x], 4) for x in (90, 95, 100, 105, 110, 120, 130) if x in curve},
            "pods": len(runs[0].arrived), "seconds": round(runs[0].seconds, 2)}


def summary(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    cells: dict[tuple[str, str], list[dict[str, object]]] = {}
    for r in rows:
        cells.setdefault((r["trace"], r["strategy"]), []).append(r)
    for (trace, strategy), rs in sorted(cells.items()):
        parts = []
        for x in ("100", "110", "130"):
            values = [r["unallocated"][x] for r in rs]  # type: ignore[index]
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            parts.append(f"{statistics.fmean(values):.2f} ± {sd:.2f}")
        secs = statistics.fmean(float(r["seconds"]) for r in rs)  # type: ignore[arg-type]
        print(f"| {trace} | {strategy} | {len(rs)} | {' | '.join(parts)} | {secs:.1f} |")


PAPER = {  # Weng et al., ATC'23, Fig. 7-9 data: (mean at 100, sd at 100, mean at 110, mean at 130)
    ("default", "random"): (13.70, 0.33, 13.12, 12.53), ("default", "best-fit"): (7.14, 0.14, 7.07, 6.92),
    ("default", "fgd"): (4.77, 0.11, 4.70, 4.61),
    ("cpu050", "random"): (10.98, 0.26, 9.71, 8.76), ("cpu050", "best-fit"): (6.44, 0.13, 6.35, 6.21),
    ("cpu050", "fgd"): (5.00, 0.11, 4.92, 4.79),
    ("gpushare40", "random"): (15.14, 0.34, 14.57, 14.00), ("gpushare40", "best-fit"): (8.56, 0.20, 8.48, 8.31),
    ("gpushare40", "fgd"): (6.04, 0.07, 5.97, 5.85),
    ("multigpu20", "random"): (13.08, 0.52, 12.15, 11.31), ("multigpu20", "best-fit"): (6.27, 0.25, 6.19, 6.07),
    ("multigpu20", "fgd"): (4.47, 0.16, 4.42, 4.35),
    ("gpuspec10", "random"): (13.74, 0.25, 13.14, 12.57), ("gpuspec10", "best-fit"): (6.90, 0.21, 6.83, 6.70),
    ("gpuspec10", "fgd"): (5.34, 0.19, 5.16, 5.05),
}
ORDER = ("random", "compact-first", "low-load-first", "node-compact-gpu-low-load", "best-fit", "fgd", "fgd-strand",
         "frag-cpu")


def markdown(path: Path) -> None:
    """The BENCHMARKS.md tables: every cell beside the paper, then frag-cpu − fgd paired by seed."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    cells: dict[tuple[str, str], dict[int, dict[str, float]]] = {}
    for r in rows:
        cells.setdefault((r["trace"], r["strategy"]), {})[r["seed"]] = r["unallocated"]
    print("| trace | strategy | seeds | 100 % (ours) | 100 % (paper) | 110 % ours / paper | 130 % ours / paper |")
    print("|---|---|---|---|---|---|---|")
    for trace in TRACES:
        for strategy in ORDER:
            by_seed = cells.get((trace, strategy))
            if not by_seed:
                continue
            at = {x: [v[x] for v in by_seed.values()] for x in ("100", "110", "130")}
            sd = statistics.stdev(at["100"]) if len(at["100"]) > 1 else 0.0
            paper = PAPER.get((trace, strategy))
            p100 = f"{paper[0]:.2f} ± {paper[1]:.2f}" if paper else "—"
            p110, p130 = (f"{paper[2]:.2f}", f"{paper[3]:.2f}") if paper else ("—", "—")
            print(f"| {trace} | {strategy} | {len(by_seed)} | {statistics.fmean(at['100']):.2f} ± {sd:.2f} | {p100} | "
                  f"{statistics.fmean(at['110']):.2f} / {p110} | {statistics.fmean(at['130']):.2f} / {p130} |")
    print()
    print("| trace | strategy | seeds paired | strategy − fgd at 100 % (mean, min, max) | seeds better / worse "
          "| GPUs saved (×62.12) |")
    print("|---|---|---|---|---|---|")
    for strategy in ("fgd-strand", "frag-cpu"):
        for trace in TRACES:
            ours, fgd = cells.get((trace, strategy), {}), cells.get((trace, "fgd"), {})
            diffs = [ours[s]["100"] - fgd[s]["100"] for s in sorted(set(ours) & set(fgd))]
            if diffs:
                mean = statistics.fmean(diffs)
                print(f"| {trace} | {strategy} | {len(diffs)} | {mean:+.2f} ({min(diffs):+.2f} … {max(diffs):+.2f}) | "
                      f"{sum(d < 0 for d in diffs)} / {sum(d > 0 for d in diffs)} | {-mean * 62.12:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shard", default="0/1")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--indexed-seeds", type=int, default=10)
    parser.add_argument("--traces", default=",".join(TRACES), help="comma-separated traces to run")
    parser.add_argument("--strategies", default="", help="comma-separated strategies to run (default: all)")
    parser.add_argument("--summary", action="store_true")
    parser.add_argument("--markdown", action="store_true", help="Print the BENCHMARKS.md tables.")
    args = parser.parse_args()
    if args.summary:
        summary(args.out)
        return
    if args.markdown:
        markdown(args.out)
        return
    index, count = (int(x) for x in args.shard.split("/"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if args.out.exists():
        done = {(r["trace"], r["strategy"], r["seed"]) for r in map(json.loads, args.out.read_text().splitlines())}
    traces = set(args.traces.split(","))
    strategies = set(args.strategies.split(",")) if args.strategies else None
    items = [i for i in plan(args.seeds, args.indexed_seeds)
             if i[0] in traces and (strategies is None or i[1] in strategies)]
    for k, item in enumerate(items):
        if k % count != index or item in done:
            continue
        row = run_item(*item)
        with args.out.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

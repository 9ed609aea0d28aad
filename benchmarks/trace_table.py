"""Benchmark: the ATC'23 table — strategies × openb traces × seeds, unallocated GPU % at 100/110/130.

Appends one JSON line per (trace, strategy, seed) to ``--out`` (resumable: done lines are
skipped), sharded with ``--shard i/n`` so two processes can share the work. Summarise with
``--summary``. Scan strategies run on the array engine (decision-for-decision equal to the
domain, tests/unit/trace/test_strategies.py), TensorFusion's indexed strategies too.

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

from services.trace import experiment, openb  # noqa: E402

TRACES = ("default", "cpu050", "gpushare40", "multigpu20", "gpuspec10")
SCAN = ("fgd", "frag-pack", "best-fit", "random")
INDEXED = ("compact-first", "low-load-first", "node-compact-gpu-low-load")


def plan(seeds: int, indexed_seeds: int) -> list[tuple[str, str, int]]:
    """Work items in priority order: scan strategies on every trace, then the indexed ones."""
    items = [(t, s, 42 + k) for t in TRACES for s in SCAN for k in range(seeds)]
    items += [(t, s, 42 + k) for k in range(indexed_seeds) for t in TRACES for s in INDEXED]
    return items


def run_item(trace: str, strategy: str, seed: int) -> dict[str, object]:
    nodes = openb.nodes()
    pods = openb.trace_pods(openb.DATA / f"openb_pod_list_{trace}.csv")
    result, runs = experiment.run(nodes, pods, strategy=strategy, seeds=1, trace=trace, first_seed=seed)
    curve = runs[0].curve()
    return {"trace": trace, "strategy": strategy, "seed": seed, "engine": result.engine,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shard", default="0/1")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--indexed-seeds", type=int, default=10)
    parser.add_argument("--summary", action="store_true")
    args = parser.parse_args()
    if args.summary:
        summary(args.out)
        return
    index, count = (int(x) for x in args.shard.split("/"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if args.out.exists():
        done = {(r["trace"], r["strategy"], r["seed"]) for r in map(json.loads, args.out.read_text().splitlines())}
    for k, item in enumerate(plan(args.seeds, args.indexed_seeds)):
        if k % count != index or item in done:
            continue
        row = run_item(*item)
        with args.out.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

"""Benchmark: defrag measured on the trace (``trace experiment --defrag``) for FGD, fgd-strand and the
default strategy on the openb traces and held-out variants, per budget of allocations moved.

Appends one JSON line per (trace, strategy, seed) to ``--out`` (resumable: done lines are
skipped): the no-defrag run and one run per budget (services/trace/defrag.py). Traces are the
data/openb names or ``heldout:<name>`` (benchmarks/heldout_variants.py). ``--markdown`` prints the
docs/placement.md table.

    nice -n 10 python3 benchmarks/defrag_trace.py --out benchmarks/results/defrag_trace.jsonl --shard 0/2
    nice -n 10 python3 benchmarks/defrag_trace.py --out benchmarks/results/defrag_trace.jsonl --shard 1/2
    python3 benchmarks/defrag_trace.py --out benchmarks/results/defrag_trace.jsonl --markdown
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec

from benchmarks.fgd_strand_eval import load
from benchmarks.heldout_variants import HELD_OUT
from services.allocator.domain.consolidation import Objective
from services.trace import defrag, openb
from services.trace.workload import typical

TRACES = ("default", "cpu050", "gpushare40", "multigpu20", "gpuspec10", *(f"heldout:{h}" for h in HELD_OUT))
STRATEGIES = ("fgd", "fgd-strand", "node-compact-gpu-low-load")
BUDGETS = (1.0, 5.0)


def run_item(trace: str, strategy: str, seed: int, objective: Objective) -> dict[str, Any]:
    """One seed: the no-defrag run and one run per budget, as a result row."""
    pods = load(trace)
    started = time.perf_counter()
    runs = defrag.run_seed(openb.nodes(), pods, strategy=strategy, seed=seed, target=typical(pods),
                           budgets_pct=BUDGETS, objective=objective)
    return {"trace": trace, "strategy": strategy, "seed": seed, "objective": objective,
            "runs": [msgspec.to_builtins(r) for r in runs], "seconds": round(time.perf_counter() - started, 1)}


def markdown(path: Path) -> None:
    """Per trace × strategy × budget: unallocated % at 100 and 130 % arrived, accepted requests
    without → with defrag, moves (% of allocations), F(M) removed and the gains per % moved."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    print("| trace | strategy | budget | seeds | moved % (moves) | F(M) GPUs before → after | unallocated % at 100 "
          "| unallocated % at 130: without → with | accepted: without → with (of requests) | gain, requests "
          "| gain per % moved: requests / unallocated points |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["trace"], r["strategy"], r["objective"]), []).append(r)
    for trace in TRACES:
        for strategy in STRATEGIES:
            for objective in ("fragmentation", "nodes"):
                rs = cells.get((trace, strategy, objective))
                if not rs:
                    continue
                for k in range(1, len(rs[0]["runs"])):
                    without = [defrag.DefragRun(**r["runs"][0]) for r in rs]
                    with_ = [defrag.DefragRun(**r["runs"][k]) for r in rs]
                    s = defrag.summarize(without, with_, strategy=strategy, trace=trace, objective=objective)
                    name = trace.removeprefix("heldout:")
                    budget = f"{s.budget_pct:g} %" + ("" if objective == "fragmentation" else " (nodes)")
                    per = (f"{s.gain_requests_per_pct_moved:+.1f} / {s.gain_unallocated_points_per_pct_moved:+.3f}"
                           if s.moves else "— (nothing moved)")
                    print(f"| {name} | {strategy} | {budget} | {s.seeds} | {s.moved_pct:.2f} ({s.moves:.0f}) | "
                          f"{s.frag_before / 1000:.1f} → {s.frag_after / 1000:.1f} | "
                          f"{s.unallocated_pct_without['100']:.2f} | {s.unallocated_pct_without['130']:.2f} → "
                          f"{s.unallocated_pct['130']:.2f} | {s.accepted_without:.0f} → {s.accepted:.0f} "
                          f"({s.requests:.0f}) | {s.gain_requests:+.0f} ({s.gain_accepted_pct:+.3f} %) | "
                          f"{per} |")
    seconds = [r["seconds"] for r in rows]
    if seconds:
        print(f"\n{len(rows)} rows, {statistics.fmean(seconds):.0f} s per row on average")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--shard", default="0/1", help="i/n: run every n-th item from the i-th")
    parser.add_argument("--traces", default=",".join(TRACES), help="comma-separated traces to run")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--objective", choices=("fragmentation", "nodes"), default="fragmentation")
    parser.add_argument("--markdown", action="store_true", help="Print the docs/placement.md table.")
    args = parser.parse_args()
    if args.markdown:
        markdown(args.out)
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if args.out.exists():
        done = {(r["trace"], r["strategy"], r["seed"], r["objective"])
                for r in map(json.loads, args.out.read_text().splitlines())}
    index, count = (int(x) for x in args.shard.split("/"))
    items = [(t, s, seed) for seed in range(42, 42 + args.seeds) for t in args.traces.split(",")
             for s in args.strategies.split(",")]
    for k, (trace, strategy, seed) in enumerate(items):
        if k % count != index or (trace, strategy, seed, args.objective) in done:
            continue
        row = run_item(trace, strategy, seed, args.objective)
        with args.out.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        print(json.dumps({k: v for k, v in row.items() if k != "runs"}), flush=True)


if __name__ == "__main__":
    main()

"""Benchmark: fgd-strand against FGD, paired per seed, on the openb traces and held-out variants.

Appends one JSON line per (trace, strategy, seed) to ``--out`` (resumable: done lines are
skipped; ``--reuse FILE`` takes rows of the same trace/strategy/seed from another result file,
e.g. the trace table's FGD runs). Each row says which engine decided: ``"domain"`` for rows
run since the array engine was deleted (the experiment runs the allocator's own Scheduler,
services/trace/experiment.py), ``"array"`` for the rows recorded at commit 3ea30dd by the
former numpy engine, which was checked decision-for-decision equal to the domain (same
curves). Traces are the
data/openb names (``default``, ``cpu050``, ...) or ``heldout:<name>`` (benchmarks/
heldout_variants.py). ``--summary`` prints the paired table (rows of ``--out`` and ``--reuse``):
per trace the means at 100 % arrived, the mean/min/max of (strategy − FGD) per seed and the
number of seeds it is better / worse.

    python3 benchmarks/fgd_strand_eval.py --out benchmarks/results/fgd_strand.jsonl \
        --reuse benchmarks/results/trace_table.jsonl --traces default cpu050 gpushare40 gpuspec10 multigpu20
    python3 benchmarks/fgd_strand_eval.py --out benchmarks/results/fgd_strand.jsonl --traces heldout:cpux150
    python3 benchmarks/fgd_strand_eval.py --out benchmarks/results/fgd_strand.jsonl --summary
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.heldout_variants import variant
from services.trace import experiment, openb
from services.trace.openb import TracePod

POINTS = ("90", "95", "100", "105", "110", "120", "130")


def load(trace: str) -> list[TracePod]:
    """The pods of a data/openb trace name or of ``heldout:<variant>``."""
    if trace.startswith("heldout:"):
        return variant(trace.split(":", 1)[1], openb.trace_pods(openb.DATA / "openb_pod_list_default.csv"))
    return openb.trace_pods(openb.DATA / f"openb_pod_list_{trace}.csv")


def run_item(trace: str, pods: list[TracePod], strategy: str, seed: int) -> dict[str, Any]:
    """One seed of ``strategy`` on ``pods`` through the domain experiment as a result row."""
    _, runs = experiment.run(openb.nodes(), pods, strategy=strategy, seeds=1, trace=trace, first_seed=seed)
    curve = runs[0].curve()
    return {"trace": trace, "strategy": strategy, "seed": seed, "engine": "domain",
            "unallocated": {x: round(curve[int(x)], 4) for x in POINTS if int(x) in curve},
            "pods": len(runs[0].arrived), "seconds": round(runs[0].seconds, 2)}


def rows(path: Path) -> list[dict[str, Any]]:
    """The result rows of a JSONL file (none when it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def sign_test(better: int, worse: int) -> float:
    """Two-sided exact sign-test p-value of ``better`` vs ``worse`` seeds (ties left out)."""
    n = better + worse
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(better, worse) + 1)) / 2**n
    return min(1.0, 2 * tail)


def summary(paths: list[Path], *, against: str = "fgd", point: str = "100") -> None:
    """Markdown: per trace and strategy, FGD's and its mean, the paired difference (mean ± standard
    error, min … max), the paired t statistic (df = seeds − 1), seeds better / worse and the sign
    test's two-sided p-value."""
    by: dict[tuple[str, str], dict[int, float]] = {}
    for r in (r for path in paths for r in rows(path)):
        by.setdefault((str(r["trace"]), str(r["strategy"])), {})[int(r["seed"])] = r["unallocated"][point]
    print("| trace | strategy | seeds | FGD | strategy | − FGD mean ± se (min … max) | paired t "
          "| seeds better / worse | sign test p |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (trace, strategy), values in sorted(by.items()):
        base = by.get((trace, against), {})
        seeds = sorted(set(values) & set(base))
        if strategy == against or not seeds:
            continue
        diff = [values[s] - base[s] for s in seeds]
        mine = statistics.fmean(values[s] for s in seeds)
        fgd = statistics.fmean(base[s] for s in seeds)
        mean = statistics.fmean(diff)
        se = statistics.stdev(diff) / math.sqrt(len(diff)) if len(diff) > 1 else 0.0
        t = f"{mean / se:+.2f}" if se > 0 else "—"
        better = sum(d < 0 for d in diff)
        worse = sum(d > 0 for d in diff)
        print(f"| {trace} | {strategy} | {len(seeds)} | {fgd:.2f} | {mine:.2f} | {mean:+.3f} ± {se:.3f} "
              f"({min(diff):+.2f} … {max(diff):+.2f}) | {t} | {better} / {worse} | {sign_test(better, worse):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--traces", nargs="*", default=[])
    parser.add_argument("--strategies", nargs="*", default=["fgd", "fgd-strand"])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--reuse", type=Path)
    parser.add_argument("--summary", action="store_true")
    parser.add_argument("--point", default="100", choices=POINTS)
    args = parser.parse_args()
    if args.summary:
        summary([args.out, *([args.reuse] if args.reuse else [])], point=args.point)
        return
    done = {(r["trace"], r["strategy"], r["seed"]) for r in rows(args.out)}
    reuse = {(r["trace"], r["strategy"], r["seed"]): r for r in rows(args.reuse)} if args.reuse else {}
    with args.out.open("a") as out:
        for trace in args.traces:
            pods = load(trace)
            for strategy in args.strategies:
                for seed in range(42, 42 + args.seeds):
                    key = (trace, strategy, seed)
                    if key in done:
                        continue
                    row = reuse.get(key) or run_item(trace, pods, strategy, seed)
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    print(trace, strategy, seed, row["unallocated"].get("100"), row["seconds"], flush=True)


if __name__ == "__main__":
    main()

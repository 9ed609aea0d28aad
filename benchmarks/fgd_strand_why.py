"""Benchmark: why fgd-strand and FGD end differently on a trace, per seed.

Two measurements on the same shuffle and node order (services/trace/experiment.py):

- **departures**: fgd-strand's run, with FGD's choice for each request asked of a second
  Scheduler on the same state (its registry maps the pool's placement name to FGD), counted by
  request class where the two nodes differ;
- **failed demand**: for FGD's run and fgd-strand's run, the GPU demand (milli-GPU) of the
  requests that were not granted up to 100 % arrived, by request class.

Classes: ``cpu-only``, ``share`` (one GPU, less than a whole), ``1 GPU``, ``k GPUs``.

    python3 benchmarks/fgd_strand_why.py --traces heldout:multi50 heldout:cpuonly25 --seeds 3
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fgd_strand_eval import load
from events.intents import RegisterNode
from events.values import AllocationSpec
from services.allocator.domain import ClusterState, Scheduler, profile
from services.allocator.domain.strategies.fgd import Fgd
from services.trace import experiment, openb
from services.trace.openb import TracePod
from services.trace.workload import tune, typical

STRAND = "fgd-strand"


def klass(pod: TracePod) -> str:
    """The request class of a trace pod."""
    if not pod.count:
        return "cpu-only"
    if pod.count == 1:
        return "share" if pod.milli < 1000 else "1 GPU"
    return f"{pod.count} GPUs"


def failed(pods: list[TracePod], run: experiment.SeedRun) -> collections.Counter[str]:
    """Milli-GPU of the requests not granted until 100 % of capacity arrived, by class."""
    out: collections.Counter[str] = collections.Counter()
    previous = 0
    for pod, arrived, used in zip(pods, run.arrived, run.used, strict=False):
        if arrived > run.capacity_milli:
            break
        if pod.demand and used == previous:
            out[klass(pod)] += pod.demand
        previous = used
    return out


def departures(nodes: list[RegisterNode], pods: list[TracePod], tuned: list[TracePod], seed: int, *, cap: int
               ) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """(requests where fgd-strand's node differs from FGD's, all requests), by class, up to 100 %
    arrived (the probe stops counting past it); ``tuned`` is the seed's arrival order of ``pods``
    for capacity ``cap`` milli-GPU (services.trace.workload.tune)."""
    target = typical(pods)
    fgd = Scheduler(profile.DEFAULT_PROFILE._replace(strategies={**profile.STRATEGIES, STRAND: Fgd}), target=target)
    strand = Scheduler(target=target)
    by_id = {f"{i}-{p.name}": p for i, p in enumerate(tuned)}
    differ: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    arrived = [0]

    def probe(state: ClusterState, spec: AllocationSpec) -> None:
        pod = by_id[spec.allocation_id]
        arrived[0] += pod.demand
        if arrived[0] > cap:
            return
        mine, theirs = strand.find(state, spec), fgd.find(state, spec)
        name = klass(pod)
        total[name] += 1
        if mine is not None and theirs is not None and mine[0].name != theirs[0].name:
            differ[name] += 1

    experiment.run_seed(nodes, pods, strategy=STRAND, seed=seed, target=target, before=probe)
    return differ, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", nargs="+", default=["heldout:multi50"])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    nodes = openb.nodes()
    cap = 1000 * sum(len(n.gpus) for n in nodes)
    for trace in args.traces:
        pods = load(trace)
        target = typical(pods)
        for seed in range(42, 42 + args.seeds):
            tuned = tune(pods, capacity_milli=cap, seed=seed)
            runs = {s: experiment.run_seed(nodes, pods, strategy=s, seed=seed, target=target)
                    for s in ("fgd", STRAND)}
            lost = {s: failed(tuned, r) for s, r in runs.items()}
            differ, total = departures(nodes, pods, tuned, seed, cap=cap)
            print(f"## {trace} seed {seed}")
            print("| class | requests | fgd-strand departs from FGD | failed milli-GPU FGD | fgd-strand |")
            print("|---|---|---|---|---|")
            for name in sorted(set(total) | set(lost["fgd"]) | set(lost[STRAND])):
                print(f"| {name} | {total[name]} | {differ[name]} | {lost['fgd'][name]} | {lost[STRAND][name]} |")


if __name__ == "__main__":
    main()

"""Benchmark: the autoscaler's hot paths, pure (no NATS): sample ingestion, evaluation rounds, checkpoints.

Builds ``--workloads`` workloads (2 workers each, one GPU per worker) in an Engine's ledger view,
then times: ingesting ``--samples`` usage samples per worker (decode from JSON + histogram add),
one evaluation round per workload (percentile + cron + merge + resize intents), and encoding
every workload's checkpoint. Prints samples/s, microseconds per round and per checkpoint.

    python3 benchmarks/bench_autoscaler.py [--workloads 500] [--samples 120]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from events import decisions
from events.metrics import UsageSample, encode_sample
from events.values import AllocationSpec, GpuSpec, Resources
from services.autoscaler import checkpoint, sources
from services.autoscaler.engine import Engine

GI = 1 << 30
T0 = datetime(2026, 3, 5, tzinfo=UTC)
ATTRS = {"tensor-fusion.ai/autoscale": "true", "gpuledger.io/autoscaling-config": json.dumps(
    {"autoSetResources": {"enable": True, "targetResource": "all", "initialDelayPeriod": "0s"}})}


def build(workloads: int) -> Engine:
    counter = iter(range(10**9))
    engine = Engine(new_id=lambda: f"r-{next(counter)}")
    for w in range(workloads):
        gpus = tuple(GpuSpec(name=f"n{w}-g{i}", capacity=Resources(milli_tflops=312_000, vram_bytes=80 * GI))
                     for i in range(2))
        engine.view.apply(decisions.NodeRegistered(at=T0, node=f"n{w}", pool="p", gpus=gpus))
        for i in range(2):
            spec = AllocationSpec(allocation_id=f"w{w}-{i}", namespace="ml", pod=f"w{w}-{i}", pool="p",
                                  workload=f"w{w}", request=Resources(milli_tflops=20_000, vram_bytes=8 * GI),
                                  limit=Resources(milli_tflops=40_000, vram_bytes=16 * GI), attributes=ATTRS)
            engine.view.apply(decisions.AllocationGranted(at=T0, spec=spec, node=f"n{w}", gpus=(gpus[i].name,),
                                                          charges=(spec.request,)))
    return engine


def payloads(workloads: int, samples: int) -> list[bytes]:
    out = []
    for minute in range(samples):
        for w in range(workloads):
            for i in range(2):
                out.append(encode_sample(UsageSample(
                    workload=f"w{w}", namespace="ml", pod=f"w{w}-{i}", allocation_id=f"w{w}-{i}",
                    milli_tflops_used=(minute * 7 + w * 13 + i) % 200_000, vram_bytes_used=(2 + (minute % 9)) * GI,
                    at=T0 + timedelta(minutes=minute))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=500)
    parser.add_argument("--samples", type=int, default=120)
    args = parser.parse_args()
    engine = build(args.workloads)
    data = payloads(args.workloads, args.samples)
    started = time.perf_counter()
    for payload in data:
        sources.take_message(engine, payload)
    ingest_s = time.perf_counter() - started
    now = T0 + timedelta(minutes=args.samples)
    started = time.perf_counter()
    intents = sum(len(engine.evaluate(key, now=now)) for key in engine.view.workloads())
    round_s = time.perf_counter() - started
    started = time.perf_counter()
    size = sum(len(checkpoint.encode(k, a, engine.states[k])) for k, a in engine.aggregators.items())
    save_s = time.perf_counter() - started
    print(f"python {platform.python_version()} on {platform.machine()}")
    print(f"ingest: {len(data)} samples in {ingest_s:.2f} s = {len(data) / ingest_s:,.0f} samples/s")
    print(f"evaluate: {args.workloads} workloads in {round_s * 1000:.1f} ms = "
          f"{round_s / args.workloads * 1e6:.0f} us/workload ({intents} resize intents)")
    print(f"checkpoint: {len(engine.aggregators)} workloads, {size / 1024:.0f} KiB in {save_s * 1000:.1f} ms = "
          f"{save_s / len(engine.aggregators) * 1e6:.0f} us/workload")


if __name__ == "__main__":
    main()

"""Benchmark: the CPU a large YAML body costs the reader's parse worker (api/parse_worker).

Parses two 1 MiB bodies with ``parse_worker.parse_checked`` (nesting check, safe load, the
values walk), once through libyaml (``yaml.CSafeLoader`` after the parse-event nesting pass, the
default when PyYAML has it) and once through the pure-Python bounded loader, and prints the best
of ``--reps`` thread-CPU times per body:

- ``pod``: a Pod whose annotations fill 1 MiB (it parses: about 49,000 values);
- ``readload``: the body ``bench_readload.py`` posts (refused after the parse: more than
  100,000 values).

    python3 benchmarks/bench_yaml_body.py [--reps 3]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_readload import big_yaml
from services.allocator.api import parse_worker


def pod_yaml(size: int = 1 << 20) -> str:
    """A Pod manifest of about ``size`` bytes, its annotations filling it."""
    filled = big_yaml(size, under="annotations", entry="example.com/key-{i}: value-{i}").decode()
    return filled + "\nspec: {containers: [{name: main}]}"


def best_cpu_s(text: str, reps: int) -> tuple[float, int]:
    """Least thread-CPU seconds of ``reps`` parses of ``text``, and the parse's status."""
    best, status = float("inf"), -1
    for _ in range(reps):
        start = time.thread_time()
        _, status, _, _ = parse_worker.parse_checked(text)
        best = min(best, time.thread_time() - start)
    return best, status


def main() -> None:
    """Print the table of per-body CPU seconds by body and loader."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    bodies = {"pod": pod_yaml(), "readload": big_yaml().decode()}
    print(f"# Python {platform.python_version()}, PyYAML {yaml.__version__}, libyaml {yaml.__with_libyaml__}")
    print("| body | bytes | status | libyaml CPU s | pure-Python CPU s | ratio |")
    print("|---|---|---|---|---|---|")
    with_libyaml = yaml.__with_libyaml__
    for name, text in bodies.items():
        fast, status = best_cpu_s(text, args.reps)
        yaml.__with_libyaml__ = False  # type: ignore[misc]  # the fallback path, as without libyaml
        try:
            pure, _ = best_cpu_s(text, args.reps)
        finally:
            yaml.__with_libyaml__ = with_libyaml  # type: ignore[misc]
        outcome = status or "parsed"
        print(f"| {name} | {len(text.encode()):,} | {outcome} | {fast:.3f} | {pure:.3f} | {pure / fast:.1f}x |")


if __name__ == "__main__":
    main()

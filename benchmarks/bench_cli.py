"""Benchmark: start-up time of the ``gpuledger`` CLI against a bare ``python -c pass``.

Runs each command N times as a fresh process (the way a user runs it) and prints the median wall
seconds and the median CPU seconds (user + system of the child: far less disturbed by other
tenants of a shared VM than wall time), each with its ratio to the bare interpreter's. The
target (issue 14) is every ``--help`` within 8x ``python -c pass``. Commands that need a stack
(``status --json``, ``queue --json``) are timed against ``--data-dir D`` when given (a running
``gpuledger up``), else against a data dir whose endpoints refuse connections (fast failure).

    python3 benchmarks/bench_cli.py [--runs 15] [--data-dir .gpuledger]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-c", "from services.cli.main import run; run()"]
HELPS = [["--help"], ["submit", "--help"], ["status", "--help"], ["quota", "set", "--help"],
         ["trace", "replay", "--help"],
         ["events", "--help"]]
READS = [["status", "--json"], ["queue", "--json"], ["nodes", "--json", "--limit", "10"]]


def medians(argv: list[str], runs: int) -> tuple[float, float]:
    """(median wall seconds, median child CPU seconds) of ``argv`` run ``runs`` times (output discarded)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def refusing_data_dir() -> Path:
    """A data dir whose endpoints.json names a closed port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    (path / "endpoints.json").write_text(json.dumps({"allocator_http": f"http://127.0.0.1:{port}",
                                                     "nats_url": f"nats://127.0.0.1:{port}"}))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    data_dir = args.data_dir or refusing_data_dir()
    bare_wall, bare_cpu = medians([sys.executable, "-c", "pass"], args.runs)
    print(f"# {platform.node()} {platform.python_version()} {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
          f"median of {args.runs} runs")
    print(f"{'command':<46} {'wall s':>7} {'x bare':>7} {'CPU s':>7} {'x bare':>7}")
    print(f"{'python -c pass':<46} {bare_wall:>7.3f} {1.0:>7.1f} {bare_cpu:>7.3f} {1.0:>7.1f}")
    for command in [*HELPS, *[[*r, "--data-dir", str(data_dir)] for r in READS]]:
        wall, cpu = medians([*CLI, *command], args.runs)
        label = "gpuledger " + " ".join(c if c != str(data_dir) else "D" for c in command)
        print(f"{label:<46} {wall:>7.3f} {wall / bare_wall:>7.1f} {cpu:>7.3f} {cpu / bare_cpu:>7.1f}")


if __name__ == "__main__":
    main()

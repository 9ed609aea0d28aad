"""Benchmark: start-up time of the ``gpuledger`` CLI against a bare ``python -c pass``.

Runs each command N times as a fresh process (the way a user runs it) and prints the median wall
seconds and the ratio to the bare interpreter's median. The target (issue 14) is every ``--help``
within 8x ``python -c pass``. Commands that need a stack (``status --json``, ``queue --json``) are
timed against ``--data-dir D`` when given (a running ``gpuledger up``), else against a data dir
whose endpoints refuse connections (the fast-failure path).

    python3 benchmarks/bench_cli.py [--runs 15] [--data-dir .gpuledger]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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


def median_s(argv: list[str], runs: int) -> float:
    """Median wall seconds of ``argv`` run ``runs`` times (output discarded)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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
    bare = median_s([sys.executable, "-c", "pass"], args.runs)
    print(f"# {platform.node()} {platform.python_version()} {os.cpu_count()} CPUs; median of {args.runs} runs")
    print(f"{'command':<44} {'median s':>9} {'x bare':>7}")
    print(f"{'python -c pass':<44} {bare:>9.3f} {1.0:>7.1f}")
    for command in [*HELPS, *[[*r, "--data-dir", str(data_dir)] for r in READS]]:
        seconds = median_s([*CLI, *command], args.runs)
        label = "gpuledger " + " ".join(c if c != str(data_dir) else "D" for c in command)
        print(f"{label:<44} {seconds:>9.3f} {seconds / bare:>7.1f}")


if __name__ == "__main__":
    main()

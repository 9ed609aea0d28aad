"""Benchmark: the cost of the contract's bounds in ``decode_intent`` (events/bounds.py, events/guard.py).

Times, per intent, msgspec's typed decode with the ``Meta`` constraints alone and the whole
``codec.decode_intent`` (payload checks: size, UTF-8, nesting, NUL; the attributes size), for a
RequestAllocation, and RegisterNode with 8 and 64 GPUs (past 32 brackets, the nesting scan runs).
Prints the best of 7 runs in microseconds per decode.

    python3 benchmarks/bench_bounds.py [--number 20000]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from events import codec, intents
from tests.corpus.bad_intents import register, request

_plain = msgspec.json.Decoder(intents.AnyIntent)


def _best_us(fn: Callable[[], object], number: int) -> float:
    best = float("inf")
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best * 1e6


def _payloads() -> dict[str, bytes]:
    node8, node64 = register("bench-8"), register("bench-64")
    node8["gpus"] = [dict(node8["gpus"][0], name=f"g{i}", index=i) for i in range(8)]
    node64["gpus"] = [dict(node64["gpus"][0], name=f"g{i}", index=i) for i in range(64)]
    return {"request_allocation": msgspec.json.encode(request("bench")),
            "register_node_8_gpus": msgspec.json.encode(node8),
            "register_node_64_gpus": msgspec.json.encode(node64)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--number", type=int, default=20_000)
    args = parser.parse_args()
    print(f"python {platform.python_version()}, msgspec {msgspec.__version__}, {platform.machine()}")
    print("| intent | bytes | typed decode µs | decode_intent µs | overhead µs |")
    print("|---|---|---|---|---|")
    for name, data in _payloads().items():
        plain = _best_us(lambda d=data: _plain.decode(d), args.number)
        bounded = _best_us(lambda d=data: codec.decode_intent(d), args.number)
        print(f"| {name} | {len(data)} | {plain:.2f} | {bounded:.2f} | {bounded - plain:.2f} |")


if __name__ == "__main__":
    main()

"""Dashboard page times at the openb size (6,212 GPUs) and at 10,412 GPUs, and the README screenshots.

Runs ``gpuledger up`` on the openb inventory with the scripted history of the browser tests
(tests/integration/dashboard/scenario.py), then per page: the server time (median of ``--repeat``
HTTP GETs: build + render + transfer) and the browser time (median of ``--repeat`` Chromium
navigations to the ``load`` event: transfer, parse, style, layout), after the first ``--pods`` GPU
pods of the openb trace were requested (a realistic fill). Then it registers 525 more
8-GPU nodes (10,412 GPUs) and measures the GPU map again. ``--screenshots DIR`` saves PNGs of the
pages at the openb size. Prints one JSON line per measurement and a Markdown table.

    python3 benchmarks/bench_dashboard.py --repeat 5 --pods 3000 --screenshots docs/dashboard
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PIL import Image
from playwright.sync_api import Page, sync_playwright

from tests.integration.dashboard import scenario

PAGES = (
    ("cluster (250 nodes/page)", "/ui/"),
    ("cluster (whole map)", "/ui/?per_page=2000"),
    ("queue", "/ui/queue"),
    ("allocation", "/ui/allocations/train-c"),
    ("node", "/ui/nodes/openb-node-1032"),
    ("placement quality", "/ui/quality"),
)
SHOTS = (("cluster", "/ui/"), ("queue", "/ui/queue"), ("allocation", "/ui/allocations/train-c"),
         ("node", "/ui/nodes/openb-node-1033"), ("quality", "/ui/quality"))


def _server_s(url: str, repeat: int) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as response:
            size = len(response.read())
        times.append(time.perf_counter() - started)
    return statistics.median(times), size


def _browser_s(page: Page, url: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        page.goto(url, wait_until="load")
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(page: Page, stack: scenario.Stack, gpus: int, repeat: int, which: tuple[tuple[str, str], ...]) -> list[
        dict[str, Any]]:
    rows = []
    for label, path in which:
        server, size = _server_s(stack.http + path, repeat)
        browser = _browser_s(page, stack.http + path, repeat)
        row = {"gpus": gpus, "page": label, "path": path, "bytes": size, "server_ms": round(1000 * server, 1),
               "browser_ms": round(1000 * browser, 1)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def screenshots(page: Page, stack: scenario.Stack, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, path in SHOTS:
        page.goto(stack.http + path, wait_until="load")
        target = folder / f"{name}.png"
        page.screenshot(path=str(target), full_page=False)
        Image.open(target).convert("RGB").quantize(colors=64).save(target, optimize=True)  # small PNGs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--screenshots", type=Path, default=None)
    parser.add_argument("--pods", type=int, default=3000, help="openb trace pods requested before measuring")
    args = parser.parse_args()
    browser_path = scenario.find_browser()
    if browser_path is None:
        raise SystemExit("no Chromium found: apt-get install chromium, or set GPULEDGER_CHROMIUM")
    base = Path(tempfile.mkdtemp(prefix="gpuledger-bench-dashboard-"))
    stack = scenario.Stack(base / "data")
    try:
        stack.wait_up()
        scenario.history(stack)
        scenario.trace_load(stack, args.pods)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=browser_path)
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            rows = measure(page, stack, scenario.OPENB_GPUS, args.repeat, PAGES)
            if args.screenshots:
                screenshots(page, stack, args.screenshots)
            scenario.scale_to_10k(stack)
            rows += measure(page, stack, scenario.TOTAL_GPUS, args.repeat, PAGES[:2] + PAGES[-1:])
            browser.close()
    finally:
        stack.stop()
        shutil.rmtree(base, ignore_errors=True)
    print("\n| GPUs | page | HTML bytes | server ms (median) | browser load ms (median) |\n|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['gpus']:,} | {row['page']} | {row['bytes']:,} | {row['server_ms']} | {row['browser_ms']} |")


if __name__ == "__main__":
    main()

"""The dashboard in a real headless Chromium against a real ``gpuledger up`` on the openb inventory.

One stack for the module (started with an API token, so every page goes through the login link
and its cookie): each page renders, a queued pod shows its reason, the allocation page lists its
events in log order, the pages refresh in place when the log moves, and the GPU map renders all
10,412 GPUs (its load time is measured and printed, never asserted; BENCHMARKS.md has figures).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.allocator.dashboard import auth
from tests.integration.dashboard import scenario

pytestmark = pytest.mark.integration

TOKEN = "dashboard-test-token"

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")


@pytest.fixture(scope="module")
def stack() -> Iterator[scenario.Stack]:
    # Outside pytest's 0700 temp root: PostgreSQL runs as another user when we are root, and a
    # concurrent pytest session re-chmods /tmp/pytest-of-<user> (as in test_cli_up).
    base = Path(tempfile.mkdtemp(prefix="gpuledger-dashboard-"))
    running = scenario.Stack(base / "data", token=TOKEN)
    try:
        running.wait_up()
        scenario.history(running)
        yield running
    finally:
        running.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = scenario.find_browser()
    if path is None:
        pytest.skip("no Chromium found (apt-get install chromium, or set GPULEDGER_CHROMIUM); .ci/run installs it")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def page(browser: Any, stack: scenario.Stack) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    tab = context.new_page()
    tab.goto(f"{stack.http}/ui/?token={TOKEN}")  # the login link: sets the cookie, redirects
    yield tab
    context.close()


def _status(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_up_prints_the_dashboard_url(stack: scenario.Stack) -> None:
    assert f"dashboard: {stack.http}/ui/" in stack.log.read_text()


def test_the_token_is_required_and_the_login_link_sets_a_cookie(stack: scenario.Stack, page: Any) -> None:
    assert _status(f"{stack.http}/ui/") == 401
    assert _status(f"{stack.http}/ui/?token=wrong") == 401
    assert _status(f"{stack.http}/ui/queue", {"Authorization": f"Bearer {TOKEN}"}) == 200
    assert _status(f"{stack.http}/ui/static/dashboard.css") == 200
    assert "token=" not in page.url  # the login link redirected to the same page without it
    cookies = page.context.cookies()
    assert [c["name"] for c in cookies] == [auth.COOKIE]
    assert TOKEN not in cookies[0]["value"] and cookies[0]["expires"] > time.time()  # a session, not the token


def test_every_page_loads_only_from_the_allocator(stack: scenario.Stack, page: Any) -> None:
    requested: list[str] = []
    errors: list[str] = []

    def on_request(request: Any) -> None:
        requested.append(request.url)

    def on_console(message: Any) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("request", on_request)
    page.on("console", on_console)
    try:
        for path in ("/ui/", "/ui/queue", "/ui/shares", "/ui/quality", "/ui/allocations/train-c",
                     f"/ui/nodes/{scenario.LOST_NODE}"):
            page.goto(stack.http + path)
            assert page.locator("header nav").count() == 1 and page.locator("main h1").count() == 1, path
    finally:
        page.remove_listener("request", on_request)
        page.remove_listener("console", on_console)
    assert {url.split("/ui/")[0] for url in requested} == {stack.http}  # no CDN, nothing external
    assert any(url.endswith("/ui/static/dashboard.css") for url in requested)
    assert not errors, errors  # the Content-Security-Policy refused nothing


def test_bad_query_values_answer_4xx_naming_the_field(stack: scenario.Stack) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for path, status, field in (("/ui/?per_page=0", 400, "per_page"), ("/ui/?per_page=2001", 400, "per_page"),
                                ("/ui/?page=abc", 400, "page"), ("/ui/queue?page=-1", 400, "page"),
                                ("/ui/?show=%3Cscript%3E", 400, "show"), (f"/ui/nodes/{'n' * 600}", 400, "name"),
                                ("/ui/nodes/no-such-node", 404, "name"), ("/ui/allocations?id=", 400, "id")):
        try:
            urllib.request.urlopen(urllib.request.Request(stack.http + path, headers=bearer), timeout=30)
            raise AssertionError(f"{path} answered 2xx")
        except urllib.error.HTTPError as exc:
            body = exc.read().decode()
            assert exc.code == status, path
            assert f'data-field="{field}"' in body and "<script>" not in body, path


def test_cluster_page_shows_pools_and_every_gpu(stack: scenario.Stack, page: Any) -> None:
    page.goto(f"{stack.http}/ui/?per_page=2000")
    row = page.locator("table.pools tbody tr", has_text="default")
    assert row.locator("td").nth(4).inner_text() == str(scenario.OPENB_GPUS)  # Pool, Nodes, Lost, Idle nodes, GPUs
    assert page.locator("#gpu-map i.c").count() == scenario.OPENB_GPUS
    assert page.locator("#gpu-map .n.lost").count() == 1
    assert scenario.LOST_NODE in page.locator("#gpu-map .n.lost a").get_attribute("href")
    # train-b holds one A10 whole; train-c, resized to 100 of 125 TFLOPS and 20 of 24 GiB, 83 % of the other
    assert page.locator("#gpu-map i.c.s5[title*=' A10 ']").count() == 1
    assert page.locator("#gpu-map i.c.s4[title*=' A10 83% used']").count() == 1
    assert page.locator("#gpu-map i.c.s1, #gpu-map i.c.s2, #gpu-map i.c.s3, #gpu-map i.c.s4").count() > 0


def test_cluster_filters_narrow_the_map(stack: scenario.Stack, page: Any) -> None:
    page.goto(f"{stack.http}/ui/")
    page.select_option("select[name=model]", "A10")
    page.click("form.filters button")
    assert page.locator("#gpu-map i.c").count() == 2
    page.locator("#gpu-map i.c").first.click()  # a GPU cell opens its node's page
    page.wait_for_url("**/ui/nodes/openb-node-103*")
    assert "A10" in page.locator("table.gpus").inner_text()
    page.goto(f"{stack.http}/ui/?show=fragmented")
    fragmented = page.locator("#gpu-map i.c")
    assert fragmented.count() > 0
    assert page.locator("#gpu-map i.c.s0, #gpu-map i.c.s5").count() == 0
    page.goto(f"{stack.http}/ui/?show=nonsense")
    assert "show must be one of" in page.locator("p.error").inner_text()


def test_queue_shows_the_waiting_pod_and_its_reason(stack: scenario.Stack, page: Any) -> None:
    page.goto(f"{stack.http}/ui/queue")
    rows = page.locator("tr.waiting")
    assert rows.count() == 1
    assert "train-d" in rows.first.inner_text()
    reason = rows.first.locator("td.reason").inner_text()
    recorded, _, now = reason.partition("now (capacity):")
    assert recorded.startswith("capacity 0/") and "GPUs fit in pool default" in recorded  # as queued
    assert now.strip().startswith("0/") and "GPUModelFilter removed" in now  # explained against the state now
    rows.first.locator("a", has_text="train-d").click()
    page.wait_for_url("**/ui/allocations/train-d")
    assert page.locator("dd.status-queued").count() == 1


def test_allocation_page_lists_its_life_in_log_order(stack: scenario.Stack, page: Any) -> None:
    page.goto(f"{stack.http}/ui/allocations/train-c")
    steps = page.locator("ol.life li.step")
    types = [steps.nth(i).locator(".type").inner_text() for i in range(steps.count())]
    assert types == ["allocation_queued", "allocation_granted", "allocation_resized"]
    positions = [int(steps.nth(i).get_attribute("data-position")) for i in range(steps.count())]
    assert positions == sorted(positions) and len(set(positions)) == 3
    assert "from the queue" in steps.nth(1).inner_text()
    page.goto(f"{stack.http}/ui/allocations/train-a")
    assert [t.inner_text() for t in page.locator("ol.life li.step .type").all()] == [
        "allocation_granted", "allocation_released"]
    page.goto(f"{stack.http}/ui/allocations/train-b")  # a rejected resize changes no read-model row
    assert [t.inner_text() for t in page.locator("ol.life li.step .type").all()] == [
        "allocation_granted", "resize_rejected"]
    page.goto(f"{stack.http}/ui/allocations/no-such-pod")
    assert "no allocation" in page.locator("p.error").inner_text()


def test_node_page_shows_gpus_allocations_and_heartbeat(stack: scenario.Stack, page: Any) -> None:
    page.goto(f"{stack.http}/ui/allocations/train-b")
    page.locator("dd a[href^='/ui/nodes/']").click()
    assert page.locator("dd.phase-Ready").count() == 1
    assert page.locator("table.allocations a", has_text="train-b").count() == 1
    assert page.locator("table.gpus tbody tr").count() == 1
    page.goto(f"{stack.http}/ui/nodes/{scenario.LOST_NODE}")
    assert page.locator("dd.phase-Lost").count() == 1
    assert "TTL 1.0 s" in page.locator("dl.facts").inner_text()


def test_quality_page_now_and_over_time(stack: scenario.Stack, page: Any) -> None:
    page.goto(f"{stack.http}/ui/quality")
    now = page.locator("tr.pool-now[data-pool=default]")
    unallocated = float(now.locator("td.unallocated").get_attribute("data-value"))
    fragmentation = float(now.locator("td.fragmentation").get_attribute("data-value"))
    assert 0 < fragmentation < unallocated < 100
    points = page.locator("figure.chart[data-pool=default] polyline.u").get_attribute("points")
    assert len(points.split()) >= 1


def test_pages_refresh_in_place_when_the_log_moves(stack: scenario.Stack, page: Any) -> None:
    page.goto(f"{stack.http}/ui/queue")
    page.evaluate("window.__sameDocument = true")
    stack.publish(scenario.request("train-e", scenario.A10, models=("A10",)))
    page.locator("tr.waiting", has_text="train-e").wait_for(timeout=20_000)
    assert page.evaluate("window.__sameDocument") is True  # no reload: the same document


def test_gpu_map_at_10412_gpus(stack: scenario.Stack, page: Any, tmp_path: Path) -> None:
    scenario.scale_to_10k(stack)
    total = sum(p["gpus"] for p in stack.get("/api/v1/status")["pools"])
    assert total == scenario.TOTAL_GPUS
    started = time.perf_counter()
    page.goto(f"{stack.http}/ui/?per_page=2000", wait_until="load")
    seconds = time.perf_counter() - started
    assert page.locator("#gpu-map i.c").count() == scenario.TOTAL_GPUS
    assert page.locator("#map-count").inner_text().startswith(f"{scenario.TOTAL_GPUS} of {scenario.TOTAL_GPUS}")
    print(json.dumps({"gpus": total, "full_map_load_s": round(seconds, 3)}))  # measured, not asserted


def test_shares_page_shows_a_share_set_through_the_api(stack: scenario.Stack, page: Any) -> None:
    """Last in the module: once a share names pool default, grants there are charged to shares."""
    body = {"namespaces": ["team-s"], "weight": 2, "pools": [{"pool": "default", "guaranteed": {"gpus": 2}}]}
    put = urllib.request.Request(f"{stack.http}/api/v1/shares/research?wait=10", data=json.dumps(body).encode(),
                                 method="PUT", headers={"Authorization": f"Bearer {TOKEN}",
                                                        "Content-Type": "application/json"})
    with urllib.request.urlopen(put, timeout=30) as answer:
        assert json.loads(answer.read())["type"] == "share_set"
    page.goto(f"{stack.http}/ui/")
    page.click("header nav a:has-text('Shares')")
    page.wait_for_url("**/ui/shares")
    row = page.locator("table.shares tr.share", has_text="research")
    assert row.count() == 1
    cells = [row.locator("td").nth(i).inner_text() for i in range(4)]
    assert cells[0] == "default" and cells[2].endswith("2 GPUs") and cells[3].endswith("0 GPUs")
    assert row.locator("svg.held rect.under").count() == 1

"""Paths as people type them: an allocation id ``NAMESPACE/POD`` with its slash unencoded (API and
dashboard), and ``/ui`` without its trailing slash."""

from __future__ import annotations

import pytest

from tests.integration.service.factory import register_node

from .conftest import Api, pod

pytestmark = pytest.mark.integration


async def test_an_unencoded_allocation_id_reads_resizes_and_releases(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    _, granted = await api.send("POST", "/api/v1/allocations", pod("p1", tflops="20"))
    assert granted["allocation_id"] == "team-a/p1"
    status, found = await api.get("/api/v1/allocations/team-a/p1")
    assert status == 200 and found["allocation_id"] == "team-a/p1" and found["status"] == "granted", found
    status, resized = await api.send("POST", "/api/v1/allocations/team-a/p1/resize", {"request": {"tflops": "30"}})
    assert status == 200 and resized["type"] == "allocation_resized", resized
    status, released = await api.send("DELETE", "/api/v1/allocations/team-a/p1")
    assert status == 200 and released["type"] == "allocation_released" and released["allocation_id"] == "team-a/p1"
    status, gone = await api.get("/api/v1/allocations/team-a/p1")
    assert status == 404 and gone["field"] == "id"
    async with api.session.get(api.base + "/ui/allocations/team-a/p1") as page:
        assert page.status == 200 and "team-a/p1" in await page.text()


async def test_ui_without_its_slash_redirects_keeping_the_query(api: Api) -> None:
    async with api.session.get(api.base + "/ui?token=abc", allow_redirects=False) as r:
        assert r.status == 308 and r.headers["Location"] == "/ui/?token=abc"
    async with api.session.get(api.base + "/ui") as r:
        assert r.status == 200 and "text/html" in r.headers["Content-Type"]
    async with api.session.get(api.base + "/api/v1/nodes/") as r:  # no slash games on the API
        assert r.status == 404



async def test_a_resize_keeps_the_dimensions_it_leaves_out(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    status, granted = await api.send("POST", "/api/v1/allocations", pod("p1", tflops="20", vram="4Gi"))
    assert status == 200 and granted["request"] == {"tflops": "20", "vram": "4Gi"}, granted
    status, resized = await api.send("POST", "/api/v1/allocations/team-a/p1/resize", {"request": {"tflops": "5"}})
    assert status == 200 and resized["type"] == "allocation_resized", resized
    _, found = await api.get("/api/v1/allocations/team-a/p1")
    assert found["request"] == {"tflops": "5", "vram": "4Gi"}, found  # was 0 VRAM: the omitted field zeroed it
    assert found["limit"] == {"tflops": "0", "vram": "0"}  # the limit left out is kept (unset), not the request
    status, _ = await api.send("POST", "/api/v1/allocations/team-a/p1/resize",
                               {"request": {"vram": "2Gi"}, "limit": {"tflops": "8"}})
    _, found = await api.get("/api/v1/allocations/team-a/p1")
    assert found["request"] == {"tflops": "5", "vram": "2Gi"} and found["limit"] == {"tflops": "8", "vram": "0"}

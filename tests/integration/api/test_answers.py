"""Issue 28 items 8, 9 and 11 through the HTTP API: misspelled annotations and names Kubernetes would
refuse are 400 naming the field; a resize keeps the limit it is not given; messages in TFLOPS / GiB."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.integration.service.factory import register_node

from .conftest import Api, pod

pytestmark = pytest.mark.integration

BAD_NAMESPACES = ["Upper-Case", "has space", "a/b", "..", "Team_B", "ns.with.dots", "<script>", "a\tb", "x\u202ey",
                  "-leading-dash"]


async def test_names_kubernetes_would_refuse_and_misspelled_keys_are_400_naming_the_field(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    for bad in BAD_NAMESPACES:
        status, body = await api.send("POST", "/api/v1/allocations", pod("p1", namespace=bad))
        assert status == 400 and body["field"] == "metadata.namespace", (bad, body)
    for bad in [n for n in BAD_NAMESPACES if n != "ns.with.dots"]:
        status, body = await api.send("POST", "/api/v1/allocations", pod(bad))
        assert status == 400 and body["field"] == "metadata.name", (bad, body)
        status, body = await api.send("POST", "/api/v1/allocations", pod("p1", pool=bad))
        assert status == 400 and body["field"] == "tensor-fusion.ai/gpupool", (bad, body)
    for bad in (" ", "a/b", "Pool_A"):
        status, body = await api.send("PUT", f"/api/v1/pools/{quote(bad, safe='')}", {"placement": "compact-first"})
        assert status == 400 and body["field"] == "pool" and "not a valid Kubernetes pool name" in body["error"], body
    typo = pod("p1")
    typo["metadata"]["annotations"]["tensor-fusion.ai/tflops-requst"] = "10"
    for path in ("/api/v1/allocations", "/api/v1/simulate"):
        status, body = await api.send("POST", path, typo)
        assert status == 400 and body["field"] == "tensor-fusion.ai/tflops-requst", body
        assert "did you mean tensor-fusion.ai/tflops-request?" in body["error"]
    wide = pod("p1", tflops="１０")
    status, body = await api.send("POST", "/api/v1/allocations", wide)
    assert status == 400 and body["field"] == "tensor-fusion.ai/tflops-request", body
    noted = pod("p1")
    noted["metadata"]["annotations"]["tensor-fusion.ai/hourly-pricing"] = "3"
    status, body = await api.send("POST", "/api/v1/simulate", noted)
    assert status == 200 and body["notes"] and "hourly-pricing" in body["notes"][0], body
    _, listed = await api.get("/api/v1/allocations")
    assert listed["items"] == []  # nothing was granted under a bad name


async def test_a_resize_keeps_the_limit_it_is_not_given_and_answers_in_tflops(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    manifest = pod("p1", tflops="10")
    manifest["metadata"]["annotations"]["tensor-fusion.ai/tflops-limit"] = "20"
    _, granted = await api.send("POST", "/api/v1/allocations", manifest)
    path = f"/api/v1/allocations/{quote(granted['allocation_id'], safe='')}/resize"
    status, resized = await api.send("POST", path, {"request": {"tflops": "6"}})
    assert status == 200 and resized["type"] == "allocation_resized", resized
    _, live = await api.get(f"/api/v1/allocations/{quote(granted['allocation_id'], safe='')}")
    assert live["request"]["tflops"] == "6" and live["limit"]["tflops"] == "20", live
    status, above = await api.send("POST", path, {"request": {"tflops": "25"}})
    assert status == 400 and above["type"] == "resize_rejected", above
    assert "(25 TFLOPS per GPU) is above its limit (20 TFLOPS)" in above["reason"], above
    status, limit_only = await api.send("POST", path, {"limit": {"tflops": "30"}})
    assert status == 200 and limit_only["type"] == "allocation_resized", limit_only
    _, live = await api.get(f"/api/v1/allocations/{quote(granted['allocation_id'], safe='')}")
    assert (live["request"]["tflops"], live["limit"]["tflops"]) == ("6", "30"), live
    status, too_big = await api.send("POST", path, {"request": {"tflops": "150"}, "limit": {"tflops": "150"}})
    assert status == 200 and too_big["type"] == "resize_rejected", too_big
    assert "it has room for 100 TFLOPS and" in too_big["reason"] and "milli" not in too_big["reason"], too_big
    assert "bytes" not in too_big["reason"], too_big

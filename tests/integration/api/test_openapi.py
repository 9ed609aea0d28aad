"""The served OpenAPI document: valid, exactly the routes served, and no request ever a 5xx
(schemathesis generates requests from it against a real allocator; hypothesis adds raw bodies)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate

from services.allocator import http
from services.allocator.api import openapi
from tests.integration.service.factory import register_node, request

from .conftest import Api

pytestmark = pytest.mark.integration

EXAMPLES = 25
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                suppress_health_check=list(HealthCheck))


async def test_the_document_is_valid_and_lists_every_route(api: Api) -> None:
    status, document = await api.get("/openapi.json")
    assert status == 200
    validate(document)
    served = {(method.lower(), path) for method, path, _ in http.ROUTES}
    documented = {(method, path) for path, item in document["paths"].items() for method in item}
    assert served == documented


def _fuzz_operations(base: str, statuses: list[int]) -> list[str]:
    """Every operation of the document, fuzzed; returns the 5xx answers seen (``statuses``: all)."""
    schema = schemathesis.openapi.from_dict(openapi.document())
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @FUZZ
        @given(case=operation.as_strategy())
        def check(case: Any) -> None:
            if case.query and "wait" in case.query:
                case.query["wait"] = "0.5"  # the property is the status, not the waiting
            response = case.call(base_url=base, timeout=30)
            statuses.append(response.status_code)
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path} {case.query} {str(case.body)[:200]}: "
                                f"{response.status_code} {response.text[:200]}")
        check()
    return failures


async def test_no_generated_request_is_answered_with_a_5xx(api: Api) -> None:
    await api.publish(register_node("n1", gpus=2), register_node("n2", gpus=1, pool="other"))
    await api.publish(request("a", tflops=60), request("q", tflops=90))
    statuses: list[int] = []
    failures = await asyncio.to_thread(_fuzz_operations, api.base, statuses)
    assert failures == []
    operations = sum(len(item) for item in openapi.document()["paths"].values())
    assert len(statuses) >= operations * 5  # every operation was exercised
    assert {200, 400} <= set(statuses)  # valid and invalid requests were both generated


_CONTENT_TYPES = st.sampled_from(["application/json", "application/yaml", "text/plain",
                                  "application/json; charset=bogus", "application/json; charset=latin-1", "",
                                  "multipart/form-data"])
_JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                    max_size=4), max_leaves=30)


_SURROGATE_TEXT = st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF) | st.characters(),
                          min_size=1, max_size=8)
"""Strings with lone surrogates (JSON ``"\\ud800"`` decodes to such a string)."""
_SURROGATE_JSON = st.recursive(_SURROGATE_TEXT | st.integers(), lambda inner: st.lists(inner, max_size=3)
                               | st.dictionaries(_SURROGATE_TEXT | st.sampled_from(["metadata", "placement", "request",
                                                                                    "total", "tflops", "name"]),
                                                 inner, max_size=3), max_leaves=12).map(
    lambda value: json.dumps({"metadata": value, "placement": value, "request": value, "total": value}).encode())


def _raw_bodies(base: str) -> list[str]:
    failures: list[str] = []
    routes = [("POST", "/api/v1/simulate"), ("POST", "/api/v1/allocations"), ("POST", "/api/v1/allocations/a/resize"),
              ("PUT", "/api/v1/pools/default"), ("PUT", "/api/v1/quotas/team-a")]

    @FUZZ
    @given(route=st.sampled_from(routes), content_type=_CONTENT_TYPES,
           body=st.binary(max_size=300) | _JSONISH.map(lambda v: repr(v).encode())
           | st.builds(lambda meta: ("{\"metadata\": " + repr(meta) + "}").encode(), _JSONISH) | _SURROGATE_JSON)
    def check(route: tuple[str, str], content_type: str, body: bytes) -> None:
        method, path = route
        headers = {"Content-Type": content_type} if content_type else {}
        response = requests.request(method, base + path + "?wait=0.5", data=body, headers=headers, timeout=30)
        if response.status_code >= 500:
            failures.append(f"{method} {path} {content_type} {body[:120]!r}: {response.status_code} "
                            f"{response.text[:200]}")
    check()
    return failures


async def test_no_raw_body_is_answered_with_a_5xx(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1), request("a", tflops=10))
    assert await asyncio.to_thread(_raw_bodies, api.base) == []

"""The OpenAPI 3.1 document of the allocator API, served at ``GET /openapi.json``.

Hand-written from the handlers' contracts (paths, parameters, bodies, statuses); a test checks it
with openapi-spec-validator, checks that it lists exactly the routes of ``services.allocator.http``,
and drives schemathesis with it. Quantities are Kubernetes strings (``"20"`` TFLOPS, ``"4Gi"``).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from events.values import NODE_PHASES

_ERROR = {"$ref": "#/components/schemas/Error"}
_PAGE = {"$ref": "#/components/schemas/Page"}
_ANY = {"type": "object", "additionalProperties": True}
_AMOUNT = {"type": ["object", "null"], "additionalProperties": False,
           "properties": {"tflops": {"type": ["string", "null"]}, "vram": {"type": ["string", "null"]}}}
_SHARE_AMOUNT = {"type": ["object", "null"], "additionalProperties": False, "properties": {
    "tflops": {"type": ["string", "null"]}, "vram": {"type": ["string", "null"]},
    "gpus": {"type": ["integer", "null"], "minimum": 0}}}
_RESOURCES = {"type": "object", "additionalProperties": False,
              "properties": {"tflops": {"type": "string"}, "vram": {"type": "string"}}}
_SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "required": ["error", "field"],
              "properties": {"error": {"type": "string"}, "field": {"type": "string"}}},
    "Page": {"type": "object", "required": ["items", "continue"],
             "properties": {"items": {"type": "array", "items": _ANY}, "continue": {"type": ["string", "null"]}}},
    "Decision": {"type": "object", "required": ["type"], "additionalProperties": True,
                 "properties": {"type": {"type": "string"}, "allocation_id": {"type": "string"},
                                "reason": {"type": "string"}, "position": {"type": ["integer", "null"]},
                                "intent_id": {"type": "string"}}},
    "Pending": {"type": "object", "required": ["intent_id", "status"],
                "properties": {"intent_id": {"type": "string"}, "status": {"const": "pending"}}},
    "Pod": {"type": "object", "additionalProperties": True, "description": "A Pod manifest (JSON or YAML)"},
    "WhatIf": {"type": "object", "additionalProperties": False, "properties": {
        **{k: {"type": "string"} for k in ("since", "until", "pool", "preemption")},
        **{k: {"type": ["string", "array"], "items": {"type": "string"}} for k in ("strategy", "quota", "nodes")}}},
    "Resize": {"type": "object", "additionalProperties": False, "required": ["request"],
               "properties": {"request": _RESOURCES, "limit": _RESOURCES}},
    "Quota": {"type": "object", "additionalProperties": False, "properties": {
        **{k: _AMOUNT for k in ("total_requests", "total_limits", "max_requests", "max_limits")},
        "max_workers": {"type": ["integer", "null"], "minimum": 0},
        "max_gpu_count": {"type": ["integer", "null"], "minimum": 0},
        "alert_threshold_percent": {"type": ["integer", "null"], "minimum": 0, "maximum": 100},
        "default_requests": _RESOURCES, "default_limits": _RESOURCES}},
    "Share": {"type": "object", "additionalProperties": False, "properties": {
        "namespaces": {"type": "array", "maxItems": 256, "items": {"type": "string"}},
        "parent": {"type": "string"}, "weight": {"type": "integer", "minimum": 1, "maximum": 1000},
        "pools": {"type": "array", "maxItems": 256, "items": {
            "type": "object", "required": ["pool"], "additionalProperties": False, "properties": {
                "pool": {"type": "string"},
                **{k: _SHARE_AMOUNT for k in ("guaranteed", "borrowing_limit", "lending_limit")}}}}}},
    "PoolConfig": {"type": "object", "additionalProperties": False, "properties": {
        "placement": {"type": "string"}, "vram_weight": {"type": "number"}, "tflops_weight": {"type": "number"},
        "max_workers_per_node": {"type": ["integer", "null"], "minimum": 0},
        "preemption": {"enum": ["cluster", "namespace", "off"]},
        "isolation_policy": {"enum": ["static", "dynamic"]}, "topology": {"enum": ["soft", "hard", "off"]},
        "max_topology_tier": {"type": ["integer", "null"], "minimum": 0, "maximum": 3},
        "enforcement": {"enum": ["none", "hami-core", "tensor-fusion"]},
        **{k: {"type": ["integer", "null"], "minimum": 0}
           for k in ("fair_share_half_life_s", "reclaim_min_runtime_s", "reclaim_max_per_minute")},
        "defrag": {"type": ["object", "null"], "additionalProperties": False, "required": ["schedule"], "properties": {
            "schedule": {"type": "string"}, "timezone": {"type": "string"}, "max_duration": {"type": "string"},
            "max_moves": {"type": "integer", "minimum": 1}, "enabled": {"type": "boolean"},
            "max_share_of_namespace": {"type": "number", "minimum": 0, "maximum": 100}}}}},
}


def _query(name: str, description: str, enum: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    if enum:
        schema["enum"] = list(enum)
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


def _path(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"},
            "description": "Percent-encoded (an allocation id such as team-a/pod-1 is team-a%2Fpod-1)"}


_PAGING = [
    {"name": "limit", "in": "query", "required": False, "description": "Page size (1..1000, default 100)",
     "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
    _query("continue", "Token of the previous page"),
]
_WAIT = {"name": "wait", "in": "query", "required": False, "description": "Seconds to wait for the decision",
         "schema": {"type": "number", "minimum": 0, "maximum": 60}}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _op(summary: str, ok: dict[str, Any], *, params: list[dict[str, Any]] | None = None,
        body: str = "", extra: tuple[int, ...] = ()) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": {"description": "OK", **_json(ok)},
                                 "400": {"description": "Bad input", **_json(_ERROR)},
                                 "401": {"description": "Bearer token missing or wrong", **_json(_ERROR)}}
    for status in extra:
        responses[str(status)] = {"description": {202: "Published, not decided yet", 404: "Not found",
                                                  409: "Conflict (not granted yet)",
                                                  413: "Body too large", 415: "Charset not supported",
                                                  422: "Window too large", 429: "Busy: one at a time",
                                                  503: "NATS unavailable (whatif: over its time bound)"}[status],
                                  **_json({"$ref": "#/components/schemas/Pending"} if status == 202 else _ERROR)}
    op: dict[str, Any] = {"summary": summary, "parameters": params or [], "responses": responses}
    if body:
        ref = {"$ref": f"#/components/schemas/{body}"}
        content = {"application/json": {"schema": ref}}
        if body == "Pod":
            content["application/yaml"] = {"schema": {"type": "string"}}
        op["requestBody"] = {"required": True, "content": content}
    return op


_DECISION = {"$ref": "#/components/schemas/Decision"}
_WRITE = (202, 413, 415, 503)


def document() -> dict[str, Any]:
    """The whole OpenAPI document (a fresh dict)."""
    q = _query
    paths: dict[str, Any] = {
        "/api/v1/pools": {"get": _op("Pools: config, capacity, allocated, available, queued by QoS", _PAGE,
                                     params=_PAGING)},
        "/api/v1/pools/{pool}": {"get": _op("A pool: config, capacity, allocated, available, queued by QoS", _ANY,
                                            params=[_path("pool")], extra=(404,)),
                                 "put": _op("Configure a pool: the fields given change, the rest keep their value",
                                            _DECISION, params=[_path("pool"), _WAIT], body="PoolConfig",
                                            extra=_WRITE),
                                 "delete": _op("Remove a pool's configuration (no nodes, no live allocations)",
                                               _DECISION, params=[_path("pool"), _WAIT], extra=(*_WRITE, 404, 409))},
        "/api/v1/pools/{pool}/defrag-plan": {"get": _op(
            "Consolidation plan, dry run: the moves that empty the most nodes within a budget, explained",
            _ANY, params=[_path("pool"), q("max_moves", "Moves at most (1-1000, default 10)"),
                          q("max_share_of_namespace", "Percent of each namespace's allocations that may move"),
                          q("max_tflops", "TFLOPS of charges in motion at most")], extra=(404,))},
        "/api/v1/pools/{pool}/defrag": {
            "get": _op("The pool's running or last defrag campaign: open (reserved) and closed moves", _ANY,
                       params=[_path("pool")], extra=(404,)),
            "post": _op("Start a defrag campaign: plan, reserve each target, evict through the Eviction API; body "
                        "max_moves, max_share_of_namespace, max_tflops, max_duration (Go duration, default 10m)",
                        _DECISION, params=[_path("pool"), _WAIT], extra=(*_WRITE, 404, 409)),
            "delete": _op("Cancel the running defrag campaign (frees its reservations)", _DECISION,
                          params=[_path("pool"), _WAIT, q("reason", "Why, for the log")], extra=(*_WRITE, 404))},
        "/api/v1/nodes": {"get": _op("Nodes (idle_since on each; idle=true: those with no granted allocation)",
                                     _PAGE, params=[q("pool", "Pool"), q("phase", "Phase", NODE_PHASES),
                                                    q("idle", "Idle (no granted allocation) or not", ("true", "false")),
                                                    q("idle_for", "Idle at least this long (Go duration, e.g. 30m)"),
                                                    *_PAGING])},
        "/api/v1/nodes/{name}": {"get": _op("A node with its GPUs and allocations", _ANY, params=[_path("name")],
                                            extra=(404,))},
        "/api/v1/nodes/{name}/allocations": {"get": _op(
            "Allocations granted on a node (TensorFusion GetAllocationReqByNodeName)", _PAGE,
            params=[_path("name"), *_PAGING], extra=(404,))},
        "/api/v1/gpus": {"get": _op("GPUs", _PAGE, params=[q("pool", "Pool"), q("node", "Node"), q("phase", "Phase"),
                                                          *_PAGING])},
        "/api/v1/allocations": {
            "get": _op("Live allocations (queued ones with their current reason)", _PAGE, params=[
                q("namespace", "Namespace"), q("pod", "Pod"), q("status", "Status", ("granted", "queued")),
                q("node", "Node"), q("pool", "Pool"), *_PAGING]),
            "post": _op("Request an allocation for a Pod (idempotent per namespace/pod)", _DECISION, params=[
                q("force", "Submit a pod without the tensor-fusion.ai/enabled label", ("true", "false")), _WAIT],
                body="Pod", extra=_WRITE)},
        "/api/v1/allocations/{id}": {
            "get": _op("An allocation and its live explanation", _ANY, params=[_path("id")], extra=(404,)),
            "delete": _op("Release an allocation", _DECISION, params=[_path("id"), _WAIT], extra=(*_WRITE, 404))},
        "/api/v1/allocations/{id}/resize": {"post": _op("Resize a granted allocation", _DECISION,
                                                        params=[_path("id"), _WAIT], body="Resize",
                                                        extra=(*_WRITE, 404, 409))},
        "/api/v1/queue": {"get": _op("Waiting requests in grant order with their current reason and, in a pool with "
                                   "shares, which share is ahead (fair_share)", _PAGE, params=[
            q("pool", "Pool"), q("namespace", "Namespace"), q("qos", "QoS", ("critical", "high", "medium", "low")),
            *_PAGING])},
        "/api/v1/quotas": {"get": _op("Quotas and usage per namespace", _PAGE, params=[q("namespace", "Namespace"),
                                                                                     *_PAGING])},
        "/api/v1/quotas/{namespace}": {
            "put": _op("Set a namespace's quota", _DECISION, params=[_path("namespace"), _WAIT], body="Quota",
                       extra=_WRITE),
            "delete": _op("Remove a namespace's quota", _DECISION, params=[_path("namespace"), _WAIT],
                          extra=(*_WRITE, 404))},
        "/api/v1/shares": {"get": _op("Shares: per pool guaranteed, used, borrowed, lent, fair share (docs/shares.md)",
                                      _PAGE, params=[q("pool", "Pool"), *_PAGING])},
        "/api/v1/shares/{name}": {
            "get": _op("A share with its figures per pool, parent and children", _ANY, params=[_path("name")],
                       extra=(404,)),
            "put": _op("Create or replace a share", _DECISION, params=[_path("name"), _WAIT], body="Share",
                       extra=_WRITE),
            "delete": _op("Remove a share (409 while it is a parent)", _DECISION, params=[_path("name"), _WAIT],
                          extra=(*_WRITE, 404, 409))},
        "/api/v1/status": {"get": _op("Summary: pools, nodes and GPUs by phase, allocation counts, shares", _ANY)},
        "/api/v1/simulate": {"post": _op("What would be decided for a Pod now (nothing written)", _ANY, body="Pod",
                                         extra=(413, 415))},
        "/api/v1/whatif": {"post": _op("Replay a window of the log under another policy (docs/whatif.md; nothing "
                                       "written)", _ANY, body="WhatIf", extra=(413, 422, 429, 503))},
    }
    for path, text in (("/healthz", "Liveness"), ("/readyz", "Readiness (503 until loaded)"),
                       ("/metrics", "Prometheus metrics"), ("/openapi.json", "This document")):
        paths[path] = {"get": {"summary": text, "security": [], "responses": {"200": {"description": "OK"}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "gpuledger allocator API", "version": "1",
                 "description": "Reads of the allocator's projection and writes published as intents. "
                                "Errors are {\"error\", \"field\"}. See docs/operations.md."},
        "paths": paths,
        "components": {"schemas": _SCHEMAS,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}, {}],
    }


async def serve(request: web.Request) -> web.Response:
    """GET /openapi.json."""
    return web.json_response(document())

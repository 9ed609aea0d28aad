"""A corpus of hostile intent payloads: each must be refused with one error naming its field.

Reusable: the codec tests (tests/unit/events/test_bounds_corpus.py) decode every entry and check
the DecodeError's ``field``; the allocator loop's tests publish the same entries between valid
intents and expect exactly one ``IntentRejected`` each. ``BAD_INTENTS`` holds the payloads of
issue 13 (gpu_count 2^31, quantities ≥ 2^63, capacity/quota 2^63, a VRAM limit of 4Ei on 2 GPUs,
3,000-character ids and names, Latin-1 bytes, 50,000 nested objects, heartbeat_ttl_s 1e15,
weight 1e308, a 600 KB id) plus our own. ``field`` is the JSON path the error must name ("" for
the payload as a whole: size, UTF-8, nesting, syntax).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import msgspec

Payload = dict[str, Any]


class BadIntent(msgspec.Struct, frozen=True, kw_only=True):
    """One hostile payload: ``name`` (test id), ``data`` (the bytes to publish), ``field`` the
    error must name, ``intent_type`` the tag it pretends to be (the subject to publish on)."""

    name: str
    data: bytes
    field: str
    intent_type: str


LONG = "x" * 3000


def request(intent_id: str = "corpus-request") -> Payload:
    """A valid RequestAllocation payload (1 GPU, 1 TFLOPS, 1 GiB)."""
    return {
        "type": "request_allocation", "intent_id": intent_id,
        "spec": {"allocation_id": f"{intent_id}-alloc", "namespace": "ns", "pod": "p", "pool": "pool-a",
                 "request": {"milli_tflops": 1000, "vram_bytes": 2**30},
                 "limit": {"milli_tflops": 1000, "vram_bytes": 2**30}, "gpu_count": 1},
    }


def register(intent_id: str = "corpus-node") -> Payload:
    """A valid RegisterNode payload (one 80 GiB / 312 TFLOPS GPU)."""
    return {
        "type": "register_node", "intent_id": intent_id, "node": "node-corpus", "pool": "pool-a",
        "gpus": [{"name": "node-corpus-gpu-0", "capacity": {"milli_tflops": 312_000, "vram_bytes": 80 * 2**30},
                  "model": "A100", "index": 0}],
        "labels": {"zone": "a"}, "heartbeat_ttl_s": 90.0,
    }


def quota(intent_id: str = "corpus-quota") -> Payload:
    """A valid SetQuota payload."""
    return {"type": "set_quota", "intent_id": intent_id, "namespace": "ns",
            "spec": {"total_requests": {"milli_tflops": 100_000, "vram_bytes": 2**40}}}


def pool(intent_id: str = "corpus-pool") -> Payload:
    """A valid ConfigurePool payload."""
    return {"type": "configure_pool", "intent_id": intent_id, "pool": "pool-a",
            "config": {"placement": "compact-first", "vram_weight": 0.7, "tflops_weight": 0.3}}


def release(intent_id: str = "corpus-release") -> Payload:
    """A valid ReleaseAllocation payload."""
    return {"type": "release_allocation", "intent_id": intent_id, "allocation_id": "a-1"}


def _set(base: Payload, path: str, value: Any) -> Payload:
    payload = copy.deepcopy(base)
    node: Any = payload
    steps = path.split(".")
    for step in steps[:-1]:
        node = node[int(step)] if step.isdigit() else node[step]
    last = steps[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return payload


def _entry(name: str, make: Callable[[str], Payload], path: str, value: Any, *, field: str = "") -> BadIntent:
    payload = _set(make(f"corpus-{name}"), path, value)
    return BadIntent(name=name, data=msgspec.json.encode(payload), field=field or path.replace(".0.", "[0]."),
                     intent_type=payload["type"])


def _raw(name: str, data: bytes, intent_type: str, field: str = "") -> BadIntent:
    return BadIntent(name=name, data=data, field=field, intent_type=intent_type)


def _latin1() -> bytes:
    good = msgspec.json.encode(_set(register("corpus-latin1"), "node", "XXX"))
    return good.replace(b"XXX", "été".encode("latin-1"))


def _nested(depth: int, key: bytes = b"a") -> bytes:
    body = msgspec.json.encode(request(f"corpus-nested-{key.decode()}"))
    return body[:-1] + b',"extra":' + (b'{"' + key + b'":') * depth + b"1" + b"}" * depth + b"}"


def _huge_int_text(digits: int) -> bytes:
    body = msgspec.json.encode(_set(request("corpus-digits"), "spec.request.vram_bytes", 7))
    return body.replace(b'"vram_bytes":7', b'"vram_bytes":' + b"9" * digits)


BAD_INTENTS: tuple[BadIntent, ...] = (
    _entry("gpu-count-2-31", request, "spec.gpu_count", 2**31),
    _entry("tflops-2-63", request, "spec.request.milli_tflops", 2**63),
    _entry("vram-request-2-64", request, "spec.request.vram_bytes", 2**64),
    _entry("capacity-2-63", register, "gpus.0.capacity.vram_bytes", 2**63),
    _entry("capacity-tflops-2-63", register, "gpus.0.capacity.milli_tflops", 2**63 - 1),
    _entry("quota-2-63", quota, "spec.total_requests.vram_bytes", 2**63),
    _entry("vram-limit-4ei-on-2-gpus", lambda i: _set(request(i), "spec.gpu_count", 2),
           "spec.limit.vram_bytes", 4 * 2**60),
    _entry("intent-id-3000", request, "intent_id", LONG),
    _entry("allocation-id-3000", request, "spec.allocation_id", LONG),
    _entry("release-id-3000", release, "allocation_id", LONG),
    _entry("pod-3000", request, "spec.pod", LONG),
    _entry("namespace-3000", request, "spec.namespace", LONG),
    _entry("namespace-64", quota, "namespace", "n" * 64),
    _entry("node-3000", register, "node", LONG),
    _entry("gpu-name-3000", register, "gpus.0.name", LONG),
    _entry("heartbeat-ttl-1e15", register, "heartbeat_ttl_s", 1e15),
    _entry("heartbeat-ttl-negative", register, "heartbeat_ttl_s", -1.0),
    _entry("weight-1e308", pool, "config.vram_weight", 1e308),
    _entry("weight-negative", pool, "config.tflops_weight", -0.5),
    _entry("label-value-64", register, "labels", {"zone": "z" * 64}),
    _entry("labels-1100", register, "labels", {f"k{i}": "v" for i in range(1100)}),
    _entry("attributes-65", request, "spec.attributes", {f"k{i}": "v" for i in range(65)}),
    _entry("attributes-17k", request, "spec.attributes", {f"k{i}": "v" * 600 for i in range(30)}),
    _entry("gpu-indices-5000", request, "spec.gpu_indices", list(range(5000)), field="spec.gpu_indices[1024]"),
    _entry("gpu-index-1024", request, "spec.gpu_indices", [1024], field="spec.gpu_indices[0]"),
    _entry("gpus-2000", register, "gpus", [register()["gpus"][0]] * 2000),
    _entry("cpu-milli-1e18", register, "cpu_milli", 10**18),
    _entry("percent-2-40", request, "spec.limit.compute_milli_percent", 2**40),
    _raw("latin1-ete", _latin1(), "register_node"),
    _raw("nested-50000", _nested(50_000), "request_allocation"),
    _raw("nested-50000-small", _nested(50_000, b""), "request_allocation"),
    _raw("nested-arrays-100000", msgspec.json.encode(request("corpus-arrays-deep"))[:-1]
         + b',"extra":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "request_allocation"),
    _raw("nested-arrays-in-labels", msgspec.json.encode(register("corpus-arrays"))[:-1]
         + b',"labels":' + b"[" * 40 + b"]" * 40 + b"}", "register_node"),
    _raw("release-600kb-id", msgspec.json.encode(_set(release("corpus-600kb"), "allocation_id", "x" * 600_000)),
         "release_allocation"),
    _raw("nul-in-name", msgspec.json.encode(request("corpus-nul")).replace(b'"pod":"p"', b'"pod":"p\\u0000"'),
         "request_allocation"),
    _raw("lone-surrogate", msgspec.json.encode(request("corpus-surrogate")).replace(b'"pod":"p"', b'"pod":"\\ud800"'),
         "request_allocation"),
    _raw("digits-5000", _huge_int_text(5000), "request_allocation", field="spec.request.vram_bytes"),
    _raw("float-1e999", msgspec.json.encode(pool("corpus-inf")).replace(b"0.7", b"1e999"), "configure_pool",
         field="config.vram_weight"),
    _raw("not-json", b"\xff\xfe not json", "request_allocation"),
)
"""Every hostile payload, in a stable order."""

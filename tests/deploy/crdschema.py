"""Validate a custom resource against its CRD's openAPIV3Schema the way the API server does, offline.

The structural schema is turned into a JSON schema: ``nullable`` adds null to the type,
``x-kubernetes-int-or-string`` accepts an integer or a string, and every object that lists
``properties`` rejects other fields unless it says ``x-kubernetes-preserve-unknown-fields`` (what
``kubectl apply`` gets with its default ``--validate=strict``: unknown fields are errors, not silently
pruned). CEL rules (``x-kubernetes-validations``) are not evaluated.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema

Obj = dict[str, Any]


def to_json_schema(schema: Obj) -> Obj:
    """A JSON schema (draft 7) equivalent to one CRD openAPIV3Schema, strict about unknown fields."""
    out = copy.deepcopy(schema)
    _rewrite(out)
    props = out.setdefault("properties", {})
    props.setdefault("apiVersion", {"type": "string"})
    props.setdefault("kind", {"type": "string"})
    props.setdefault("metadata", {"type": "object"})
    return out


def _rewrite(node: Obj) -> None:
    if node.pop("x-kubernetes-int-or-string", False):
        node.pop("type", None)
        node.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.pop("nullable", False) and "type" in node:
        node["type"] = [node["type"], "null"]
    preserve = node.pop("x-kubernetes-preserve-unknown-fields", False)
    if "properties" in node and "additionalProperties" not in node and not preserve:
        node["additionalProperties"] = False
    for child in node.get("properties", {}).values():
        _rewrite(child)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            _rewrite(node[key])
    for key in ("allOf", "anyOf", "oneOf"):
        for child in node.get(key, []):
            _rewrite(child)


def crd_validators(crds: list[Obj]) -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    """(apiVersion, kind) -> validator, for every served version of every CRD given."""
    validators: dict[tuple[str, str], jsonschema.protocols.Validator] = {}
    for crd in crds:
        spec = crd["spec"]
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            schema = to_json_schema(version["schema"]["openAPIV3Schema"])
            jsonschema.Draft7Validator.check_schema(schema)
            key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
            validators[key] = jsonschema.Draft7Validator(schema)
    return validators


def errors_of(validator: jsonschema.protocols.Validator, obj: Obj) -> list[str]:
    """Readable validation errors (``spec.resources.requests.tflops: ...``); empty when valid."""
    return [f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
            for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]

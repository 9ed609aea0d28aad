"""Kubernetes node affinity JSON (a WorkloadProfile's or the Pod's own) -> events.values.NodeAffinity.

Required terms are ORed and each term's requirements ANDed (Kubernetes semantics), so two required
affinities are combined by the cross product of their terms. ``nodeSelector`` becomes one ``In``
requirement per label, added to every term. ``matchFields`` are not supported (denied).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events.values import NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm
from services.podspec.errors import PodSpecError

_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


def _requirement(raw: Any, *, field: str) -> NodeSelectorRequirement:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("key"), str):
        raise PodSpecError(f"{field}: a requirement needs a string key", field=field, value=repr(raw))
    operator = raw.get("operator")
    if operator not in _OPERATORS:
        raise PodSpecError(f"{field}: unknown operator {operator!r}", field=field, value=str(operator))
    values = raw.get("values") or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise PodSpecError(f"{field}: values must be a list of strings", field=field, value=repr(values))
    return NodeSelectorRequirement(key=raw["key"], operator=operator, values=tuple(values))


def _term(raw: Any, *, field: str) -> NodeSelectorTerm:
    if not isinstance(raw, Mapping):
        raise PodSpecError(f"{field}: must be an object", field=field, value=repr(raw))
    if raw.get("matchFields"):
        raise PodSpecError(
            f"{field}.matchFields: not supported, use matchExpressions on node labels",
            field=f"{field}.matchFields",
            value=repr(raw["matchFields"]),
        )
    expressions = raw.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise PodSpecError(f"{field}.matchExpressions: must be a list", field=field, value=repr(expressions))
    return NodeSelectorTerm(
        match_expressions=tuple(
            _requirement(item, field=f"{field}.matchExpressions[{i}]") for i, item in enumerate(expressions)
        )
    )


def _preferred(raw: Any, *, field: str) -> PreferredSchedulingTerm:
    weight = raw.get("weight") if isinstance(raw, Mapping) else None
    if not isinstance(weight, int) or not 1 <= weight <= 100:
        raise PodSpecError(f"{field}.weight: must be an integer in [1, 100]", field=field, value=str(weight))
    return PreferredSchedulingTerm(
        weight=weight, preference=_term(raw.get("preference") or {}, field=f"{field}.preference")
    )


def parse_node_affinity(raw: Any, *, field: str) -> NodeAffinity | None:
    """A Kubernetes ``NodeAffinity`` object (camelCase JSON) -> NodeAffinity; None when empty."""
    if not raw:
        return None
    if not isinstance(raw, Mapping):
        raise PodSpecError(f"{field}: must be an object", field=field, value=repr(raw))
    required_raw = raw.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required_raw.get("nodeSelectorTerms") or [] if isinstance(required_raw, Mapping) else []
    preferred = raw.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    affinity = NodeAffinity(
        required=tuple(_term(t, field=f"{field}.required.nodeSelectorTerms[{i}]") for i, t in enumerate(terms)),
        preferred=tuple(_preferred(p, field=f"{field}.preferred[{i}]") for i, p in enumerate(preferred)),
    )
    return affinity if affinity.required or affinity.preferred else None


def _and_terms(left: tuple[NodeSelectorTerm, ...], right: tuple[NodeSelectorTerm, ...]) -> tuple[NodeSelectorTerm, ...]:
    if not left or not right:
        return left or right
    return tuple(
        NodeSelectorTerm(match_expressions=a.match_expressions + b.match_expressions) for a in left for b in right
    )


def combine(*affinities: NodeAffinity | None, node_selector: Mapping[str, str] | None = None) -> NodeAffinity | None:
    """AND several affinities and a nodeSelector into one NodeAffinity (None when nothing constrains)."""
    required: tuple[NodeSelectorTerm, ...] = ()
    preferred: tuple[PreferredSchedulingTerm, ...] = ()
    for affinity in affinities:
        if affinity is not None:
            required = _and_terms(required, affinity.required)
            preferred += affinity.preferred
    if node_selector:
        selector_term = NodeSelectorTerm(
            match_expressions=tuple(
                NodeSelectorRequirement(key=k, operator="In", values=(v,)) for k, v in sorted(node_selector.items())
            )
        )
        required = _and_terms(required, (selector_term,))
    if not required and not preferred:
        return None
    return NodeAffinity(required=required, preferred=preferred)

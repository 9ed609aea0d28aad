"""NodeAffinityFilter: required node affinity over node labels with Kubernetes semantics.

Required terms are ORed, the expressions of a term ANDed; an empty term matches nothing.
Operators: In, NotIn, Exists, DoesNotExist, Gt, Lt (NotIn/DoesNotExist match an absent label,
Gt/Lt compare integers). Preferred terms do not filter; ``preference_weight`` ranks nodes.
(TensorFusion's deprecated NodeAffinityFilter read the Kubernetes Node; gpuledger matches the
labels discovery reported.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from events.values import NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm
from services.allocator.domain.framework import OK, UNRESOLVABLE, Context, Status
from services.allocator.domain.model import NodeState
from services.allocator.domain.need import Need


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def requirement_matches(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """Whether one requirement holds for ``labels``; an unknown operator never matches."""
    present = req.key in labels
    value = labels.get(req.key, "")
    op = req.operator
    if op == "In":
        return present and value in req.values
    if op == "NotIn":
        return not present or value not in req.values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(req.values) == 1:
        left, right = _int_or_none(value), _int_or_none(req.values[0])
        if left is None or right is None:
            return False
        return left > right if op == "Gt" else left < right
    return False


def term_matches(term: NodeSelectorTerm, labels: Mapping[str, str]) -> bool:
    """All expressions hold; an empty term matches nothing (Kubernetes)."""
    return bool(term.match_expressions) and all(requirement_matches(r, labels) for r in term.match_expressions)


def required_matches(affinity: NodeAffinity, labels: Mapping[str, str]) -> bool:
    """No required terms, or at least one matches."""
    return not affinity.required or any(term_matches(t, labels) for t in affinity.required)


def preference_weight(affinity: NodeAffinity | None, labels: Mapping[str, str]) -> int:
    """Σ weights of the preferred terms that match (kube-scheduler NodeAffinity score input)."""
    if affinity is None:
        return 0
    return sum(p.weight for p in affinity.preferred if term_matches(p.preference, labels))


class NodeAffinityFilter:
    """Removes every GPU of a node whose labels fail the request's required node affinity."""

    name: ClassVar[str] = "NodeAffinityFilter"
    rejected: ClassVar[Status] = Status(UNRESOLVABLE, "node labels fail the required node affinity")

    def enabled(self, need: Need) -> bool:
        """On when the request has required terms."""
        return need.affinity is not None and bool(need.affinity.required)

    def filter(self, node: NodeState, need: Need, ctx: Context) -> Status:
        """Required terms hold for the node's labels."""
        return OK if need.affinity is None or required_matches(need.affinity, node.labels) else self.rejected

"""A grant's share and borrowed mark reach what users read: ``submit --json`` (the outcome view),
the allocation document (``why``, ``GET /api/v1/allocations/{id}``) and ``why``'s lines."""

from __future__ import annotations

from datetime import UTC, datetime

from events import decisions
from services.allocator.api import documents, views
from services.allocator.domain.model import GRANTED, AllocationState
from services.cli import lifecycle_commands
from tests.unit.allocator.builders import a_request, res

NOW = datetime(2026, 11, 28, tzinfo=UTC)


def _granted(share: str, borrowed: bool) -> decisions.AllocationGranted:
    return decisions.AllocationGranted(at=NOW, spec=a_request("a1", 10, 4 << 30), node="n1", gpus=("n1-gpu-0",),
                                       charges=(res(10, 4 << 30),), share=share, borrowed=borrowed)


def test_the_outcome_view_names_the_share_and_whether_the_grant_borrowed() -> None:
    view = views.outcome_view(_granted("research", True), position=7)
    assert (view["share"], view["borrowed"]) == ("research", True)
    assert views.outcome_view(_granted("research", False), position=7)["borrowed"] is False
    plain = views.outcome_view(_granted("", False), position=7)  # a pool without shares: no keys at all
    assert "share" not in plain and "borrowed" not in plain


def test_the_allocation_document_and_why_lines_carry_the_share() -> None:
    allocation = AllocationState(spec=a_request("a1", 10, 4 << 30), status=GRANTED, requested_at=NOW, node="n1",
                                 gpus=["n1-gpu-0"], charges=[res(10, 4 << 30)], share="research", borrowed=True)
    doc = documents.allocation_doc(allocation)
    assert (doc["share"], doc["borrowed"]) == ("research", True)
    assert lifecycle_commands._share_text(doc) == "research (borrowed)"
    allocation.borrowed = False
    assert lifecycle_commands._share_text(documents.allocation_doc(allocation)) == "research (within its guarantee)"
    allocation.share = ""
    assert "share" not in documents.allocation_doc(allocation)

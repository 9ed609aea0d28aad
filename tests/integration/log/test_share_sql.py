"""The share queries of docs/sql.md ("Shares"), run verbatim against a log appended from a story
decided by the domain: in pool p, share a waits 10 minutes for a GPU while under its guarantee
(share b holds the pool within its own guarantee, so nothing can be reclaimed); in pool q, share c
and a namespace in no share borrow. Each grant's ``share``/``borrowed`` are set here by the rule of
docs/allocation.md, so the story reads the same whatever the domain's borrowing code marks."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import msgspec
import pytest

from events import decisions as ev
from events import intents as it
from services.allocator.ports import DecidedIntent
from tests.integration.log.logged import logged_database
from tests.integration.log.test_history_sql import DOC, Rows, run
from tests.unit.allocator.builders import T0, Cluster, Gi, a_gpu, a_request, a_share

pytestmark = pytest.mark.integration

LEAF = {"ns-a": "a", "ns-b": "b", "ns-c": "c", "ns-d": "d"}
BORROWED = {"c2", "x1"}


def share_queries() -> dict[str, str]:
    """``{"S1": sql, "S2": sql}`` from the ``### Sn. title`` sections."""
    return dict(re.findall(r"^### (S\d+)\. .*?\n```sql\n(.*?)```", DOC.read_text(), flags=re.M | re.S))


def _marked(event: ev.AnyEvent) -> ev.AnyEvent:
    if not isinstance(event, ev.AllocationGranted):
        return event
    return msgspec.structs.replace(event, share=LEAF.get(event.spec.namespace, ""),
                                   borrowed=event.spec.allocation_id in BORROWED)


@pytest.fixture(scope="module")
def populated(postgres_admin_url: str, postgres_template: str) -> str:
    c = Cluster()
    batches: list[DecidedIntent] = []

    def send(intent: it.AnyIntent) -> list[ev.AnyEvent]:
        events = tuple(_marked(e) for e in c.send(intent))
        batches.append(DecidedIntent(intent_id=intent.intent_id, stream_seq=0, events=events))
        return list(events)

    for node, pool, count in (("n1", "p", 2), ("n2", "q", 3)):
        gpus = tuple(a_gpu(f"{pool}{i}", 100, 80 * Gi) for i in range(count))
        send(it.RegisterNode(intent_id=node, node=node, pool=pool, gpus=gpus))
    for name, spec in (("a", a_share("ns-a", pool="p", gpus=2)), ("b", a_share("ns-b", pool="p", gpus=2)),
                       ("c", a_share("ns-c", pool="q", gpus=1)), ("d", a_share("ns-d", pool="q", gpus=1, tflops=100))):
        assert isinstance(send(it.SetShare(intent_id=f"share-{name}", name=name, spec=spec))[0], ev.ShareSet)
    for uid, ns, pool in (("b1", "ns-b", "p"), ("b2", "ns-b", "p"), ("c1", "ns-c", "q"), ("c2", "ns-c", "q"),
                          ("x1", "ns-x", "q")):
        granted = send(it.RequestAllocation(intent_id=uid, spec=a_request(uid, 100, 80 * Gi, ns=ns, pool=pool)))
        assert isinstance(granted[0], ev.AllocationGranted), granted
    c.tick(60)
    assert isinstance(send(it.RequestAllocation(intent_id="a1", spec=a_request("a1", 100, 80 * Gi, ns="ns-a",
                                                                               pool="p")))[0], ev.AllocationQueued)
    c.tick(600)
    released = send(it.ReleaseAllocation(intent_id="r", allocation_id="b1"))
    assert any(isinstance(e, ev.AllocationGranted) for e in released)
    return logged_database(postgres_admin_url, postgres_template, batches)


def test_the_doc_has_the_share_queries() -> None:
    assert sorted(share_queries()) == ["S1", "S2"]


def test_s1_each_borrowed_grant_with_the_shares_it_borrowed_from(populated: str) -> None:
    rows: Rows = run(populated, share_queries()["S1"])
    assert [(r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9]) for r in rows] == [
        ("c", "ns-c", "c2", "q", Decimal("100.0"), Decimal("80.0"), 1, "d (guaranteed 100.0 TFLOPS, 1 GPUs)",
         "granted"),
        ("(no share)", "ns-x", "x1", "q", Decimal("100.0"), Decimal("80.0"), 1,
         "c (guaranteed 1 GPUs); d (guaranteed 100.0 TFLOPS, 1 GPUs)", "granted")]
    assert rows[0][0] == T0


def test_s2_the_time_a_share_waited_under_its_guarantee(populated: str) -> None:
    rows = run(populated, share_queries()["S2"])
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [("a", "p", timedelta(minutes=10), 1)]
    assert rows[0][4] == T0 + timedelta(seconds=60) and rows[0][5] == T0 + timedelta(seconds=660)

"""Per-message rules of the allocator loop (services.allocator.loop.batch), on the real domain, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from events import decisions
from services.allocator import domain, ports
from services.allocator.domain.state import ClusterState
from services.allocator.loop import batch

from .factory import delivery, raw_delivery, register_node, request

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def decide(state: ClusterState, deliveries: list[ports.Delivery], processed: set[str] | None = None,
           ) -> batch.BatchResult:
    return batch.decide_batch(state, deliveries, processed=processed or set(), now=NOW,
                              process=domain.process, evolve=domain.evolve)


def test_valid_intents_are_decided_in_stream_order_against_the_advancing_state() -> None:
    state = ClusterState.empty()
    result = decide(state, [delivery(register_node("n1", gpus=1), 1), delivery(request("a", tflops=60), 2),
                            delivery(request("b", tflops=60), 3)])
    assert [d.intent_id for d in result.decided] == ["register-n1", "req-a", "req-b"]
    assert [d.stream_seq for d in result.decided] == [1, 2, 3]
    assert isinstance(result.decided[1].events[0], decisions.AllocationGranted)
    assert isinstance(result.decided[2].events[0], decisions.AllocationQueued)  # a took 60 of 100 TFLOPS
    assert result.actions == [ports.ACK, ports.ACK, ports.ACK]
    assert state.allocations["a"].status == "granted"


def test_undecodable_payload_becomes_intent_rejected_and_is_terminated() -> None:
    state = ClusterState.empty()
    garbage = b"{not json" + b"x" * 10_000
    result = decide(state, [raw_delivery(garbage, 7, msg_id="m-7")])
    assert result.actions == [ports.TERM]
    (event,) = result.decided[0].events
    assert isinstance(event, decisions.IntentRejected)
    assert event.intent_id == "m-7"
    assert event.subject == "gpuledger.intent.request_allocation"
    assert event.intent_type == "request_allocation"
    assert len(event.raw) == batch.RAW_LIMIT
    assert "malformed" in event.reason


def test_invalid_intent_names_the_offending_field() -> None:
    payload = b'{"type": "request_allocation", "intent_id": "i1", "spec": {"namespace": "x"}}'
    result = decide(ClusterState.empty(), [raw_delivery(payload, 1)])
    (event,) = result.decided[0].events
    assert isinstance(event, decisions.IntentRejected)
    assert event.intent_id == "nats-seq-1"
    assert event.field.startswith("spec")


def test_intent_without_msg_id_keys_on_its_sequence() -> None:
    result = decide(ClusterState.empty(), [raw_delivery(b"\xff\xfe", 42)])
    assert result.decided[0].intent_id == "nats-seq-42"


def test_already_processed_intent_gets_no_second_decision() -> None:
    state = ClusterState.empty()
    result = decide(state, [delivery(register_node("n1"), 1), delivery(request("a"), 2)],
                    processed={"req-a"})
    assert [d.intent_id for d in result.decided] == ["register-n1"]
    assert result.actions == [ports.ACK, ports.ACK]
    assert result.duplicates == 1
    assert "a" not in state.allocations


def test_duplicate_inside_one_batch_is_decided_once() -> None:
    again = request("a")
    result = decide(ClusterState.empty(), [delivery(register_node("n1"), 1), delivery(again, 2),
                                           delivery(again, 3)])
    assert [d.intent_id for d in result.decided] == ["register-n1", "req-a"]
    assert result.duplicates == 1


def test_candidate_ids_cover_msg_id_and_payload_id() -> None:
    intent = request("a", intent_id="payload-id")
    wrapped = ports.Delivery(stream_seq=5, subject="s", data=delivery(intent, 5).data, msg_id="header-id")
    assert batch.candidate_ids([wrapped, raw_delivery(b"junk", 6)]) == ["header-id", "payload-id", "nats-seq-6"]


_items = st.lists(
    st.one_of(
        st.integers(0, 5).map(lambda i: ("request", i)),
        st.integers(0, 3).map(lambda i: ("garbage", i)),
        st.just(("node", 0)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(items=_items, processed=st.sets(st.sampled_from([f"req-p{i}" for i in range(6)])))
def test_every_distinct_intent_is_decided_exactly_once(items: list[tuple[str, int]], processed: set[str]) -> None:
    deliveries = []
    for seq, (kind, i) in enumerate(items, start=1):
        if kind == "request":
            deliveries.append(delivery(request(f"p{i}"), seq))
        elif kind == "garbage":
            deliveries.append(raw_delivery(b"garbage", seq, msg_id=f"g{i}"))
        else:
            deliveries.append(delivery(register_node("n1"), seq))
    result = decide(ClusterState.empty(), deliveries, processed)
    ids = [d.intent_id for d in result.decided]
    assert len(ids) == len(set(ids))
    assert set(ids).isdisjoint(processed)
    expected = {d.msg_id for d in deliveries} - processed
    assert set(ids) == expected
    assert len(result.actions) == len(deliveries)
    assert all(d.events for d in result.decided if d.intent_id.startswith(("req-", "g")))


def test_intent_with_nul_character_is_rejected_not_retried_forever() -> None:
    payload = delivery(request("a\x00b"), 1)
    assert b"\\u0000" in payload.data
    result = decide(ClusterState.empty(), [payload])
    (event,) = result.decided[0].events
    assert isinstance(event, decisions.IntentRejected)
    assert "NUL" in event.reason
    assert "\x00" not in event.raw
    assert result.actions == [ports.TERM]

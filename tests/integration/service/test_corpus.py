"""The hostile corpus (tests/corpus/bad_intents.py) through the real loop (nats-server + PostgreSQL):
each bad payload is published between two valid intents, all in one stream the leader fetches as
one batch. Every valid intent is decided normally, every bad one gets exactly one IntentRejected
naming its field, and the log verifies (``replay --verify``)."""

from __future__ import annotations

import asyncpg
import pytest
from nats.js import JetStreamContext

from events import subjects
from services.allocator.adapters import database
from services.shared import messaging
from tests.corpus.bad_intents import BAD_INTENTS

from .factory import register_node, request
from .harness import start_replica
from .outcomes import check_one_outcome_each, outcomes, wait_decided

pytestmark = pytest.mark.integration


async def test_each_bad_payload_gets_one_rejection_and_the_intents_around_it_are_decided(
        nats_url: str, database_url: str, jetstream: JetStreamContext) -> None:
    await messaging.publish_intent(jetstream, register_node("n1", gpus=4))
    bad_seqs: dict[int, str] = {}
    valid = [request(f"ok-{i}", tflops=1) for i in range(len(BAD_INTENTS) + 1)]
    await messaging.publish_intent(jetstream, valid[0])
    for entry, after in zip(BAD_INTENTS, valid[1:], strict=True):
        ack = await jetstream.publish(subjects.intent_subject(entry.intent_type), entry.data,
                                      headers={"Nats-Msg-Id": f"bad-{entry.name}"})
        bad_seqs[int(ack.seq)] = entry.name
        await messaging.publish_intent(jetstream, after)
    pool: asyncpg.Pool = await database.create_pool(database_url)
    replica = await start_replica(nats_url, database_url=database_url)
    try:
        await wait_decided(pool, valid[-1].intent_id)
        decided = await outcomes(pool)
        assert len(decided) == 1 + len(valid) + len(BAD_INTENTS)  # one outcome per message, none lost
        for seq, name in bad_seqs.items():
            assert decided[seq].intent_id == f"bad-{name}" and decided[seq].types == ["intent_rejected"], name
        by_id = {o.intent_id: o.types for o in decided.values()}
        assert all(by_id[intent.intent_id] == ["allocation_granted"] for intent in valid)
        fields = dict(await pool.fetch("SELECT intent_id, coalesce(data->>'field', '') FROM events "
                                       "WHERE type = 'intent_rejected'"))
        wrong = {e.name: fields[f"bad-{e.name}"] for e in BAD_INTENTS if fields[f"bad-{e.name}"] != e.field}
        assert not wrong, wrong
        await check_one_outcome_each(pool)
    finally:
        await replica.stop()
        await pool.close()

"""deploy/'s NATS permissions on a real nats-server: the rendered nats.conf + auth.conf with test
passwords and a trustme CA, TLS required. The real allocator (in-memory log) creates the streams,
consumes intents and writes events as user ``allocator``; each producer's allowed operations work;
every forbidden publish, JetStream API call and login is refused and leaves the streams unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats
import pytest
from nats.aio.client import Client as NATS
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from events import codec, intents, subjects
from events.values import QuotaSpec, ShareSpec
from services.allocator import bootstrap
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.settings import AllocatorSettings
from services.autoscaler import checkpoint
from services.autoscaler.engine import WorkloadState
from services.shared import messaging
from services.shared.natsserver import NatsServer
from services.shared.settings import NatsSecurity
from tests.deploy.conftest import Obj
from tests.deploy.natsconf import (
    SHARED_PASSWORD,
    config_files,
    fresh_passwords,
    server_environment,
    single_server_config,
    write_tls,
)
from tests.integration.autoscaler.runner import start_autoscaler
from tests.integration.service.factory import register_node, request
from tests.integration.service.harness import ReaderProcess, start_reader

pytestmark = pytest.mark.integration


BUCKET = "gpuledger_autoscaler"


class Secured(msgspec.Struct, kw_only=True):
    server: NatsServer
    passwords: dict[str, str]
    ca_file: str


class Session(msgspec.Struct, kw_only=True):
    """A connected client and the errors the server sent it."""

    client: NATS
    errors: list[str]


@pytest.fixture
def secured(rendered: dict[str, list[Obj]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Secured]:
    files = config_files(rendered["prod"])
    write_tls(tmp_path / "tls")
    passwords = fresh_passwords()
    for name, value in server_environment(passwords).items():
        monkeypatch.setenv(name, value)
    server = NatsServer(tmp_path / "nats", config=single_server_config(files, tmp_path / "tls"))
    server.start()
    try:
        yield Secured(server=server, passwords=passwords, ca_file=str(tmp_path / "tls" / "ca.crt"))
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def session(secured: Secured, user: str) -> AsyncIterator[Session]:
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    service = SHARED_PASSWORD.get(user, user)  # the checkpoint user logs in with its service's password
    inbox = "" if user == "operator" else f"_INBOX_{service}"  # as the manifests set GPULEDGER_NATS_INBOX_PREFIX
    security = NatsSecurity(user=user, password=secured.passwords[service], tls_ca=secured.ca_file,
                            inbox_prefix=inbox)
    client = await messaging.connect(secured.server.url, name=user, security=security, error_cb=on_error)
    try:
        yield Session(client=client, errors=errors)
    finally:
        await client.close()


async def _refused_publish(who: Session, subject: str, *, jetstream: bool = True) -> None:
    """Publishing ``subject`` is refused: no ack (JetStream) and a permissions violation naming it."""
    if jetstream:
        with pytest.raises(NatsError):
            await who.client.jetstream().publish(subject, b"{}", timeout=1)
    else:
        await who.client.publish(subject, b"{}")
        await who.client.flush()
    await _violation(who, f'publish to "{subject}"')


async def _violation(who: Session, what: str) -> None:
    """Wait for the server's permissions violation for ``what`` (``publish to "subject"``)."""
    for _ in range(50):
        if any(f"permissions violation for {what}".lower() in e.lower() for e in who.errors):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no permissions violation for {what}: {who.errors}")


async def _messages(client: NATS) -> dict[str, int]:
    js = client.jetstream()
    return {name: (await js.stream_info(name)).state.messages
            for name in (subjects.INTENT_STREAM, subjects.EVENT_STREAM)}


async def _settled(client: NATS) -> dict[str, int]:
    """The stream counts once the allocator has decided and relayed the one intent published so far."""
    counts = await _messages(client)
    for _ in range(200):
        await asyncio.sleep(0.1)
        previous, counts = counts, await _messages(client)
        if counts[subjects.EVENT_STREAM] >= 1 and counts == previous:
            return counts
    raise AssertionError(f"the allocator relayed no event of the registered node: {counts}")


def _allocator_environment(secured: Secured, monkeypatch: pytest.MonkeyPatch) -> None:
    """The allocator's NATS settings as its manifest sets them (its URL carries user and password)."""
    monkeypatch.setenv("GPULEDGER_NATS_TLS_CA", secured.ca_file)
    monkeypatch.setenv("GPULEDGER_NATS_INBOX_PREFIX", "_INBOX_allocator")


@contextlib.asynccontextmanager
async def allocator(secured: Secured, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """The allocator as user ``allocator`` and a reader as user ``api`` (each with its own inbox
    prefix, as their manifests set it); yields the reader's URL (the HTTP API)."""
    settings = AllocatorSettings(nats_url=secured.server.url_for("allocator", secured.passwords["allocator"]),
                                 http_port=0, holder="permissions-test", heartbeat_check_s=0)
    stop, ready = asyncio.Event(), asyncio.get_running_loop().create_future()
    leases = InMemoryLeaseStore()
    store = InMemoryEventStore(leases)
    task = asyncio.create_task(bootstrap.serve(settings, stop, store=store, leases=leases,
                                               on_ready=lambda a, port: ready.set_result((a, port))))
    readers: list[ReaderProcess] = []
    try:
        done, _ = await asyncio.wait([task, ready], timeout=30, return_when=asyncio.FIRST_COMPLETED)
        assert ready in done, task.exception() if task.done() else "allocator not ready"
        serving, _port = ready.result()
        while not serving.keeper.is_leader:
            await asyncio.sleep(0.05)
        monkeypatch.setenv("GPULEDGER_NATS_INBOX_PREFIX", "_INBOX_api")  # read once, at connect
        readers.append(await start_reader(secured.server.url_for("api", secured.passwords["api"]),
                                          store=store, history=store))
        monkeypatch.setenv("GPULEDGER_NATS_INBOX_PREFIX", "_INBOX_allocator")
        yield f"http://127.0.0.1:{readers[0].port}"
    finally:
        for reader in readers:
            await reader.stop()
        stop.set()
        await asyncio.wait_for(task, 30)


async def _next_event(sub: Any, tag: str) -> dict[str, Any]:
    while True:
        msg = await sub.next_msg(timeout=15)
        if msg.subject == subjects.event_subject(tag):
            decoded: dict[str, Any] = msgspec.json.decode(msg.data)
            return decoded


async def _request_once_served(client: NATS, subject: str, within_s: float = 10.0) -> Any:
    """``client``'s request on ``subject``, asked again while the server answers "no responders":
    on a loaded machine the responder's subscription, flushed by another connection, can reach the
    server's interest graph after the first request (seen in CI under load); a refusal by
    permissions never becomes a responder, so it still fails, at the deadline."""
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        try:
            return await client.request(subject, b"{}", timeout=5)
        except nats.errors.NoRespondersError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_each_service_can_do_what_its_code_does(secured: Secured, monkeypatch: pytest.MonkeyPatch) -> None:
    _allocator_environment(secured, monkeypatch)
    async with (allocator(secured, monkeypatch) as api, session(secured, "discovery") as discovery,
                session(secured, "admission") as admission, session(secured, "autoscaler") as autoscaler,
                session(secured, "autoscaler_checkpoints") as checkpoints, session(secured, "operator") as operator):
        await messaging.ensure_streams(discovery.client.jetstream())  # info only: the streams exist
        await messaging.publish_intent(discovery.client.jetstream(), register_node("node-a"))
        events = await messaging.subscribe_events(admission.client.jetstream())
        seq = await messaging.publish_intent(admission.client.jetstream(), request("pod-1"))
        assert seq >= 2
        granted = await _next_event(events, "allocation_granted")
        assert granted["spec"]["allocation_id"] == "pod-1" and granted["node"] == "node-a"
        await events.unsubscribe()

        quota = intents.SetQuota(intent_id="quota-1", namespace="team-b", spec=QuotaSpec(max_workers=3))
        await messaging.publish_intent(operator.client.jetstream(), quota)
        share = intents.SetShare(intent_id="share-research-1", name="research", spec=ShareSpec(namespaces=("team-c",)))
        await messaging.publish_intent(admission.client.jetstream(), share)  # the GPUShare watch
        resize = intents.ResizeAllocation(intent_id="resize-1", allocation_id="pod-1",
                                          request=request("x").spec.request, limit=request("x").spec.limit)
        await messaging.publish_intent(autoscaler.client.jetstream(), resize)
        kv = await checkpoint.open_bucket(checkpoints.client.jetstream(), BUCKET)  # creates it
        await kv.put("w.test", b"state")
        assert (await kv.get("w.test")).value == b"state"
        assert await kv.keys() == ["w.test"]  # checkpoint.load lists the keys (an ordered consumer)

        async def recommend(msg: Any) -> None:
            await msg.respond(b"recommendation")

        await autoscaler.client.subscribe(subjects.AUTOSCALER_RECOMMEND_SUBJECT, cb=recommend)
        await autoscaler.client.flush()
        reply = await _request_once_served(operator.client, subjects.AUTOSCALER_RECOMMEND_SUBJECT)
        assert reply.data == b"recommendation"
        for reader in (autoscaler, operator):  # the ordered consumers of the autoscaler and `gpuledger events`
            followed = await messaging.subscribe_events(reader.client.jetstream())
            assert (await followed.next_msg(timeout=15)).subject.startswith(f"{subjects.EVENT_SUBJECT_PREFIX}.")
            await followed.unsubscribe()
        assert not (discovery.errors + admission.errors + autoscaler.errors + checkpoints.errors + operator.errors)
        # A write of the HTTP API: published by a reader and its outcome read back, as user api.
        async with aiohttp.ClientSession() as http:
            async with http.delete(f"{api}/api/v1/allocations/pod-1?wait=10") as answer:
                assert answer.status == 200, await answer.text()
                assert (await answer.json())["type"] == "allocation_released"
            async with http.put(f"{api}/api/v1/shares/batch?wait=10", json={"namespaces": ["team-d"]}) as answer:
                assert answer.status == 200, await answer.text()
                assert (await answer.json())["type"] == "share_set"
        counts = await _messages(operator.client)
        assert counts[subjects.INTENT_STREAM] == 7 and counts[subjects.EVENT_STREAM] >= 5


async def test_forbidden_publishes_and_stream_changes_are_refused(secured: Secured,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _allocator_environment(secured, monkeypatch)
    async with (allocator(secured, monkeypatch), session(secured, "discovery") as discovery,
                session(secured, "api") as reader,
                session(secured, "admission") as admission, session(secured, "autoscaler") as autoscaler,
                session(secured, "agent") as agent, session(secured, "operator") as operator):
        await messaging.publish_intent(discovery.client.jetstream(), register_node("node-a"))
        before = await _settled(operator.client)
        await _refused_publish(admission, subjects.intent_subject("register_node"))
        await _refused_publish(admission, subjects.intent_subject("configure_pool"))
        await _refused_publish(discovery, subjects.intent_subject("request_allocation"))
        await _refused_publish(discovery, subjects.event_subject("allocation_granted"))
        await _refused_publish(autoscaler, subjects.intent_subject("release_allocation"))
        await _refused_publish(autoscaler, subjects.event_subject("allocation_released"))
        await _refused_publish(agent, subjects.intent_subject("register_node"))
        await _refused_publish(operator, subjects.event_subject("allocation_granted"))
        await _refused_publish(reader, subjects.intent_subject("register_node"))
        await _refused_publish(reader, subjects.intent_subject("check_heartbeats"))
        await _refused_publish(reader, subjects.event_subject("allocation_granted"))
        # Acking (and so dropping) the allocator's intents, or deleting, purging, re-configuring a stream.
        await _refused_publish(admission, f"$JS.ACK.{subjects.INTENT_STREAM}.allocator.1.1.1.0.0", jetstream=False)
        for who in (admission, discovery, autoscaler, operator, reader):
            for api in (f"$JS.API.STREAM.DELETE.{subjects.EVENT_STREAM}",
                        f"$JS.API.STREAM.PURGE.{subjects.INTENT_STREAM}",
                        f"$JS.API.STREAM.UPDATE.{subjects.EVENT_STREAM}",
                        f"$JS.API.CONSUMER.DELETE.{subjects.INTENT_STREAM}.allocator",
                        f"$JS.API.STREAM.MSG.DELETE.{subjects.EVENT_STREAM}"):
                await _refused_publish(who, api, jetstream=False)
        await agent.client.publish(subjects.metrics_subject("node-a"), b"{}")
        await agent.client.flush()
        assert await _messages(operator.client) == before
        # Reading another service's replies (the allocator's pulled intents) or the events directly.
        for who, subject in ((admission, "_INBOX_allocator.>"), (autoscaler, "_INBOX.>"),
                             (reader, "_INBOX_allocator.>"),
                             (discovery, subjects.event_subject("allocation_granted")), (agent, "_INBOX.>")):
            await who.client.subscribe(subject)
            await who.client.flush()
            await _violation(who, f'subscription to "{subject}"')


async def _login_refused(url: str, **options: Any) -> str:
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(repr(exc))

    with pytest.raises((NatsError, OSError, asyncio.TimeoutError)) as caught:
        client = await nats.connect(url, allow_reconnect=False, connect_timeout=3, error_cb=on_error, **options)
        await client.close()
    return " ".join([*errors, repr(caught.value)])


async def test_anonymous_wrong_password_and_unverified_tls_logins_are_refused(secured: Secured) -> None:
    context = messaging.tls_context(NatsSecurity(tls_ca=secured.ca_file))
    url = secured.server.url
    assert "Authorization Violation" in await _login_refused(url, tls=context)
    assert "Authorization Violation" in await _login_refused(url, tls=context, user="admission", password="guess")
    assert "Authorization Violation" in await _login_refused(
        url, tls=context, user="admission", password=secured.passwords["discovery"])
    # The right password to a server whose certificate is not trusted (system roots only): refused
    # before the password is sent.
    assert "CERTIFICATE_VERIFY_FAILED" in await _login_refused(
        url, user="admission", password=secured.passwords["admission"])
    async with session(secured, "admission") as admission:
        assert admission.client.is_connected


async def test_a_producer_started_before_the_allocator_waits_for_its_streams(
        secured: Secured, monkeypatch: pytest.MonkeyPatch) -> None:
    """Discovery may not create streams: ``ensure_streams`` waits until the allocator has made them."""
    _allocator_environment(secured, monkeypatch)
    async with session(secured, "discovery") as discovery:
        waiting = asyncio.create_task(messaging.ensure_streams(discovery.client.jetstream()))
        await asyncio.sleep(1)
        assert not waiting.done()
        async with allocator(secured, monkeypatch):
            await asyncio.wait_for(waiting, 30)
            await messaging.publish_intent(discovery.client.jetstream(), register_node("node-a"))
        denied = f"$JS.API.STREAM.CREATE.{subjects.INTENT_STREAM}".lower()
        assert any(denied in e.lower() for e in discovery.errors), discovery.errors


async def _api(who: Session, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    """The JetStream API's answer to a permitted request (an ``error`` member when it refused)."""
    reply = await who.client.request(subject, msgspec.json.encode(body), timeout=10)
    answer: dict[str, Any] = msgspec.json.decode(reply.data)
    return answer


async def test_the_autoscaler_can_neither_recreate_its_bucket_nor_read_other_streams(
        secured: Secured, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's attack: delete the bucket's stream, re-create it on ``_INBOX_allocator.>`` and read
    the pulled intents back with STREAM.MSG.GET; and the variant that needs no re-creation: a get of
    its own bucket whose reply subject is an intent subject, so that JetStream stores a forged intent."""
    _allocator_environment(secured, monkeypatch)
    async with (allocator(secured, monkeypatch), session(secured, "discovery") as discovery,
                session(secured, "admission") as admission, session(secured, "autoscaler") as autoscaler,
                session(secured, "autoscaler_checkpoints") as checkpoints, session(secured, "operator") as operator,
                session(secured, "api") as api_user):
        await messaging.publish_intent(discovery.client.jetstream(), register_node("node-a"))
        before = await _settled(operator.client)
        kv = await checkpoint.open_bucket(checkpoints.client.jetstream(), BUCKET)
        await kv.put("w.forged", codec.encode(register_node("forged-node")))  # bytes of an intent it may not send
        stream = f"KV_{BUCKET}"
        for who in (autoscaler, checkpoints):
            for api in (f"$JS.API.STREAM.DELETE.{stream}", f"$JS.API.STREAM.UPDATE.{stream}",
                        f"$JS.API.STREAM.PURGE.{stream}", "$JS.API.STREAM.CREATE.SPY",
                        f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.spy", f"$JS.API.CONSUMER.CREATE.{stream}.spy"):
                await _refused_publish(who, api, jetstream=False)
        await _refused_publish(autoscaler, f"$JS.API.STREAM.CREATE.{stream}", jetstream=False)
        # The checkpoint user may create its bucket; creating it again on other subjects is refused.
        foreign = {"name": stream, "subjects": ["_INBOX_allocator.>"], "retention": "limits", "storage": "file",
                   "num_replicas": 1}
        assert "already in use" in (await _api(checkpoints, f"$JS.API.STREAM.CREATE.{stream}", foreign))["error"][
            "description"]
        assert (await checkpoints.client.jetstream().stream_info(stream)).config.subjects == [f"$KV.{BUCKET}.>"]
        for who in (autoscaler, admission, discovery, operator, api_user):
            for stream_name in (subjects.INTENT_STREAM, subjects.EVENT_STREAM):
                for api in (f"$JS.API.STREAM.MSG.GET.{stream_name}", f"$JS.API.DIRECT.GET.{stream_name}"):
                    await _refused_publish(who, api, jetstream=False)
            await _refused_publish(who, f"$JS.API.CONSUMER.CREATE.{subjects.INTENT_STREAM}", jetstream=False)
        # Its answers stay in its account: a get or a push consumer aimed at an intent subject stores nothing.
        intent_subject = subjects.intent_subject("register_node")
        await checkpoints.client.publish(f"$JS.API.STREAM.MSG.GET.{stream}", reply=intent_subject,
                                         payload=msgspec.json.encode({"last_by_subj": f"$KV.{BUCKET}.w.forged"}))
        pushed = await _api(checkpoints, f"$JS.API.CONSUMER.CREATE.{stream}", {"stream_name": stream, "config": {
            "deliver_subject": intent_subject, "deliver_policy": "all", "ack_policy": "none"}})
        assert "error" not in pushed, pushed
        await checkpoints.client.flush()
        await asyncio.sleep(1)
        assert await _messages(operator.client) == before
        assert not any("forged-node" in e for e in checkpoints.errors)


async def test_admission_reads_events_only_through_ephemeral_consumers(
        secured: Secured, monkeypatch: pytest.MonkeyPatch) -> None:
    """No durable consumer (by name in the subject: permissions; in the body: nats-server), none on
    the intents, none delivering onto the event stream's own subjects. nats-server accepts any other
    deliver subject (nats-io/nats-server#8274): what reaches it is the allocator's own events, and an
    intent subject receives nothing (no user may subscribe there, so JetStream delivers nothing). Any
    API answer can still be addressed to an intent subject: the allocator rejects it."""
    _allocator_environment(secured, monkeypatch)
    async with (allocator(secured, monkeypatch), session(secured, "discovery") as discovery,
                session(secured, "admission") as admission, session(secured, "operator") as operator):
        await messaging.publish_intent(discovery.client.jetstream(), register_node("node-a"))
        before = await _settled(operator.client)
        events = subjects.EVENT_STREAM
        for api in (f"$JS.API.CONSUMER.CREATE.{events}.binder", f"$JS.API.CONSUMER.CREATE.{events}.binder.gpuledger.>",
                    f"$JS.API.CONSUMER.DURABLE.CREATE.{events}.binder", f"$JS.API.CONSUMER.DELETE.{events}.binder",
                    f"$JS.API.CONSUMER.CREATE.{subjects.INTENT_STREAM}",
                    f"$JS.API.CONSUMER.MSG.NEXT.{subjects.INTENT_STREAM}.allocator"):
            await _refused_publish(admission, api, jetstream=False)
        create = f"$JS.API.CONSUMER.CREATE.{events}"
        durable = await _api(admission, create, {"stream_name": events,
                                                 "config": {"durable_name": "binder", "ack_policy": "explicit"}})
        assert "ephemeral" in durable["error"]["description"], durable

        def push(deliver: str) -> dict[str, Any]:
            return {"stream_name": events, "config": {"deliver_subject": deliver, "deliver_policy": "all",
                                                      "ack_policy": "none"}}

        onto_events = await _api(admission, create, push(subjects.event_subject("allocation_granted")))
        assert "cycle" in onto_events["error"]["description"], onto_events
        assert "error" not in await _api(admission, create, push(subjects.intent_subject("register_node")))
        spy = await operator.client.subscribe("_INBOX.spy")
        await operator.client.flush()
        assert "error" not in await _api(admission, create, push("_INBOX.spy"))
        delivered = await spy.next_msg(timeout=15)
        assert delivered.subject == subjects.event_subject("node_registered"), delivered.subject
        await asyncio.sleep(1)
        assert await _messages(operator.client) == before
        # What stays open (docs/security.md): the server's own answer, addressed to an intent subject,
        # is stored there, and the allocator records it as an intent_rejected.
        rejected = await operator.client.subscribe(subjects.event_subject("intent_rejected"))
        await operator.client.flush()
        await admission.client.publish(f"$JS.API.STREAM.INFO.{events}", b"",
                                       reply=subjects.intent_subject("register_node"))
        event = msgspec.json.decode((await rejected.next_msg(timeout=15)).data)
        assert event["subject"] == subjects.intent_subject("register_node"), event
        assert (await _messages(operator.client))[subjects.INTENT_STREAM] == before[subjects.INTENT_STREAM] + 1


async def test_the_autoscaler_service_keeps_its_checkpoints_in_its_own_account(
        secured: Secured, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real service as its manifest runs it: user ``autoscaler`` plus ``autoscaler_checkpoints``
    (GPULEDGER_AUTOSCALER_CHECKPOINT_NATS_USER) for the bucket; a checkpoint saved at stop is loaded
    by the next start, and the bucket is not in the account of the streams."""
    _allocator_environment(secured, monkeypatch)
    key = ("team-a", "trainer")
    async with allocator(secured, monkeypatch), session(secured, "allocator") as streams_account:
        for name, value in {"USER": "autoscaler", "PASSWORD": secured.passwords["autoscaler"],
                            "INBOX_PREFIX": "_INBOX_autoscaler"}.items():  # the manifest's, once the allocator runs
            monkeypatch.setenv(f"GPULEDGER_NATS_{name}", value)
        first = await start_autoscaler(secured.server.url, autoscaler_checkpoint_nats_user="autoscaler_checkpoints")
        first.runtime.engine.states[key] = WorkloadState()
        first.runtime.engine.touched.add(key)
        await first.stop()
        again = await start_autoscaler(secured.server.url, autoscaler_checkpoint_nats_user="autoscaler_checkpoints")
        try:
            assert key in again.runtime.engine.states
        finally:
            await again.stop()
        with pytest.raises(NotFoundError):
            await streams_account.client.jetstream().stream_info(f"KV_{BUCKET}")

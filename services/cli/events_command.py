"""``gpuledger events``: the committed event stream (JetStream ``GPULEDGER_EVENTS``), filterable.

Prints the last ``--last`` events (default 20) and exits, or with ``--follow`` keeps printing new
ones until Ctrl-C. Filters (``--type``, ``--namespace``, ``--pod``, ``--node``) apply to each event:
namespace/pod/node are read from the event or its request spec. Text is one line an event
(position, time, type, pod, node, reason); ``--json`` prints one JSON object a line (the event as
stored, plus ``position`` and ``intent_id``). Exit codes: 0 done, 1 stack unreachable, 2 bad input.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer

from services.cli import endpoints, output
from services.cli.exits import DataDir, JsonOut, guarded
from services.cli.output import BadInput

POSITION_HEADER = "Gpuledger-Position"
INTENT_HEADER = "Gpuledger-Intent-Id"
"""Headers the allocator's relay puts on each published event (services.allocator.adapters.relay)."""


class EventFilter:
    """Which events to print: ``types`` (tags; empty: all), ``namespace``, ``pod``, ``node`` ("" any)."""

    def __init__(self, types: list[str], namespace: str, pod: str, node: str) -> None:
        self.types, self.namespace, self.pod, self.node = set(types), namespace, pod, node

    def matches(self, payload: dict[str, Any]) -> bool:
        """True when ``payload`` (an event as JSON) passes every filter."""
        if self.types and payload.get("type") not in self.types:
            return False
        spec = _spec(payload)
        for wanted, key in ((self.namespace, "namespace"), (self.pod, "pod"), (self.node, "node")):
            if wanted and wanted != payload.get(key, spec.get(key)):
                return False
        return True


def _spec(payload: dict[str, Any]) -> dict[str, Any]:
    spec = payload.get("spec")
    return spec if isinstance(spec, dict) else {}


def event_line(payload: dict[str, Any]) -> str:
    """One text line of an event: position, time, type, namespace/pod, node, reason."""
    spec = _spec(payload)
    namespace = payload.get("namespace", spec.get("namespace", ""))
    pod = payload.get("pod", spec.get("pod", ""))
    who = f"{namespace}/{pod}" if pod else (payload.get("allocation_id", "") or namespace or payload.get("gpu", "")
                                            or payload.get("pool", ""))
    parts = [str(payload.get("position", "")), str(payload.get("at", ""))[:19].replace("T", " "),
             payload.get("type", ""), who, payload.get("node", "")]
    if payload.get("reason"):
        parts.append(str(payload["reason"]))
    return "  ".join(part for part in parts if part)


def _known_types() -> set[str]:
    from typing import get_args

    from events import decisions

    return {member.__struct_config__.tag for member in get_args(decisions.AnyEvent)}


async def _stream(url: str, where: str, *, last: int, follow: bool, flt: EventFilter, as_json: bool) -> None:
    from nats.js.api import ConsumerConfig, DeliverPolicy

    from events import subjects
    from services.cli import bus
    from services.cli.client import StackUnreachable

    client = await bus.connect(url, name="gpuledger-events", where=where)
    try:
        js = client.jetstream()
        info = await js.stream_info(subjects.EVENT_STREAM)
        end = info.state.last_seq
        if not follow and (end == 0 or last == 0):
            return
        start = max(1, end - last + 1) if last else end + 1
        sub = await js.subscribe(f"{subjects.EVENT_SUBJECT_PREFIX}.>", ordered_consumer=True,
                                 config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                                       opt_start_seq=start))
        idle = 0.0
        while True:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except TimeoutError:
                idle += 1.0
                if not client.is_connected:
                    raise StackUnreachable(f"lost the NATS connection to {bus.redacted(url)}") from None
                if not follow and idle >= 5.0:
                    return
                continue
            idle = 0.0
            _print(msg, flt, as_json)
            if not follow and msg.metadata.sequence.stream >= end:
                return
    finally:
        await bus.close(client)


def _print(msg: Any, flt: EventFilter, as_json: bool) -> None:
    try:
        payload = json.loads(msg.data)
    except ValueError:
        return
    if not isinstance(payload, dict) or not flt.matches(payload):
        return
    headers = msg.headers or {}
    payload["position"] = int(headers.get(POSITION_HEADER) or 0) or None
    payload["intent_id"] = headers.get(INTENT_HEADER, "")
    typer.echo(json.dumps(payload) if as_json else event_line(payload))


def events(
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events until Ctrl-C.")] = False,
    last: Annotated[int, typer.Option("--last", min=0, help="Start this many events back (0: only new ones).")]
    = 20,
    types: Annotated[list[str] | None, typer.Option("--type", help="Only this event type, e.g. allocation_granted "
                                                    "(repeat for several).")] = None,
    namespace: Annotated[str, typer.Option("--namespace", help="Only events of this namespace.")] = "",
    pod: Annotated[str, typer.Option("--pod", help="Only events of this pod.")] = "",
    node: Annotated[str, typer.Option("--node", help="Only events of this node.")] = "",
    data_dir: DataDir = None,
    as_json: JsonOut = False,
) -> None:
    """Show the event stream.

    The committed events: the last ones (--last), or follow new ones (--follow)."""

    def body() -> None:
        unknown = sorted(set(types or []) - _known_types())
        if unknown:
            raise BadInput(f"unknown event type {unknown[0]!r}; known: {', '.join(sorted(_known_types()))}",
                           field="type")
        found = endpoints.resolve(data_dir)
        flt = EventFilter(types or [], namespace, pod, node)
        try:
            asyncio.run(_stream(found.nats_url, found.source, last=last, follow=follow, flt=flt, as_json=as_json))
        except KeyboardInterrupt:
            return  # Ctrl-C ends --follow: done

    guarded(as_json, body)


def register(app: typer.Typer) -> None:
    """Add ``events`` to ``app``."""
    app.command("events", epilog=output.EXIT_CODES_HELP)(events)


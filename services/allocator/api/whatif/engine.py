"""The what-if replay: rebuild the state at the window's start from the log, then re-decide every
intent of the window through ``domain.process``, once as recorded (the baseline) and once per
:class:`~services.allocator.api.whatif.changes.Alternative`.

``Replay`` is the synchronous core, fed chunks of stored events in log order (``feed``), then
closed (``finish``); it writes nothing anywhere. Events before ``since`` are folded into the
start state (``evolve``, as ``replay`` does); from the first event at or after ``since`` (by the
event's decision time ``at``) each intent's events form one group (consecutive, one
``intent_id``), its intent is rebuilt (``intents.reconstruct``) and decided at its recorded time by
every run. The baseline's events must equal the recorded ones: each intent where they differ counts
as a mismatch (the check that the comparison is fair). An alternative drops a release or resize
of an allocation it does not hold, and the registrations of a node it removed; its queue is
retried by ``process`` exactly as the allocator's is.

:func:`whatif` is the driver over an EventStore (the CLI reads PostgreSQL directly; the reader's
API runs each chunk in a worker thread): snapshot or empty start, events streamed in chunks of
:data:`CHUNK`, a bound on the window's intents, progress after each chunk.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TypeVar

import msgspec

from events import decisions as ev
from events import intents as it
from events.codec import tag_of
from events.values import QuotaAmount, QuotaSpec
from services.allocator.api.whatif import intents as rebuild
from services.allocator.api.whatif.changes import Alternative, ChangeError
from services.allocator.api.whatif.meter import Fate, Meter, Summary
from services.allocator.domain import Scheduler, evolve, process
from services.allocator.domain.state import ClusterState, StaleSnapshot, decode_snapshot, encode_snapshot
from services.allocator.ports import EventStore, StoredEvent

CHUNK = 1000
"""Events read and replayed at a time (bounds memory; Ctrl-C and progress act between chunks)."""

DIFFERENCES_SHOWN = 20
"""Requests whose fate differs listed per alternative (all are counted)."""

MISMATCHES_SHOWN = 5
"""Baseline mismatches described (all are counted)."""

T = TypeVar("T")


class WindowTooLarge(ValueError):
    """The window holds more intents than the caller's bound."""


class Difference(msgspec.Struct, kw_only=True):
    """A request whose fate differs: its id, namespace, pod and both fates in words; ``why`` is the
    alternative's reason (its queue reason, rejection or preemptor)."""

    allocation_id: str
    namespace: str
    pod: str
    baseline: str
    alternative: str
    why: str


class RunReport(msgspec.Struct, kw_only=True):
    """One run: its name, changes, figures, intents dropped (releases of allocations it never held,
    a removed node's reports) and its series ``[seconds after since, GPU %, TFLOPS %, waiting]``."""

    name: str
    changes: Alternative
    summary: Summary
    dropped: int
    series: list[tuple[float, float, float, int]]


class Comparison(msgspec.Struct, kw_only=True):
    """An alternative against the baseline: how many requests' fates differ and the first ones."""

    name: str
    differing: int
    first: list[Difference]


class Fairness(msgspec.Struct, kw_only=True):
    """The baseline's check against the log: intents whose replayed events differ from the recorded."""

    mismatches: int
    examples: list[str] = []


class WhatIfReport(msgspec.Struct, kw_only=True):
    """What ``gpuledger whatif --json`` and ``POST /api/v1/whatif`` return."""

    pool: str | None
    since: datetime
    until: datetime
    first_position: int
    last_position: int
    intents: int
    events: int
    not_replayed: int
    fairness: Fairness
    runs: list[RunReport]
    comparisons: list[Comparison]


class _Run:
    """One replay: its state, Scheduler, measures and the changes it applies."""

    def __init__(self, state: ClusterState, change: Alternative, pool: str | None, since: datetime) -> None:
        self.state, self.change, self.pool = state, change, pool
        self.scheduler = Scheduler()
        self.meter = Meter(state, pool, since)
        self.removed = set(change.remove_nodes)
        self.caps = {q.namespace: q for q in change.quotas}
        self.configured: set[str] = set()
        self.dropped = 0
        self._setup = 0

    def targets(self, pool: str) -> bool:
        """Whether the alternative changes ``pool``."""
        return self.pool is None or pool == self.pool

    def _config_changes(self) -> bool:
        return self.change.strategy is not None or self.change.preemption is not None

    def _config(self, config: it.ConfigurePool) -> it.ConfigurePool:
        new = config.config
        if self.change.strategy is not None:
            new = msgspec.structs.replace(new, placement=self.change.strategy)
        if self.change.preemption is not None:
            new = msgspec.structs.replace(new, preemption=self.change.preemption)
        return msgspec.structs.replace(config, config=new)

    def quota_spec(self, spec: QuotaSpec, namespace: str) -> QuotaSpec:
        """``spec`` with the alternative's total request cap of ``namespace``."""
        cap = self.caps[namespace]
        return msgspec.structs.replace(spec, total_requests=QuotaAmount(milli_tflops=cap.milli_tflops,
                                                                        vram_bytes=cap.vram_bytes))

    def decide(self, intent: it.AnyIntent, at: datetime) -> list[ev.AnyEvent]:
        """Decide ``intent`` at ``at`` in this run and observe its events."""
        events = process(self.state, intent, at, self.scheduler)
        request_id = ""
        if isinstance(intent, it.RequestAllocation):
            spec = intent.spec
            request_id = spec.allocation_id
            self.meter.request(request_id, spec.namespace, spec.pod, spec.pool, at)
        self.meter.observe(self.state, events, at, request_id=request_id)
        return events

    def setup(self, intent: it.AnyIntent, at: datetime) -> None:
        """Decide a change of the alternative itself (applied at the window's start or as a pool appears)."""
        self._setup += 1
        self.decide(msgspec.structs.replace(intent, intent_id=f"whatif-{self._setup}"), at)

    def configure(self, pool: str, at: datetime) -> None:
        """Give ``pool`` the alternative's strategy / preemption from now on (once per pool)."""
        if self._config_changes() and self.targets(pool) and pool not in self.configured:
            self.configured.add(pool)
            current = it.ConfigurePool(intent_id="-", pool=pool, config=self.state.pool_config(pool))
            changed = self._config(current)
            if changed.config != current.config:
                self.setup(changed, at)

    def adapt(self, intent: it.AnyIntent, at: datetime, *, held: bool) -> it.AnyIntent | None:
        """The intent as this run decides it (None: dropped). ``held``: the allocation a release or
        resize names was live in the baseline (one this run does not hold is then dropped; one neither
        holds is decided, as it was, into its refusal)."""
        match intent:
            case it.ReleaseAllocation() | it.ResizeAllocation():
                if held and intent.allocation_id not in self.state.allocations:
                    return None
            case it.RegisterNode():
                if intent.node in self.removed:
                    return None
                self.configure(intent.pool, at)
            case it.RemoveNode():
                if intent.node in self.removed:
                    return None
            case it.ConfigurePool():
                if self._config_changes() and self.targets(intent.pool):
                    self.configured.add(intent.pool)
                    return self._config(intent)
            case it.SetQuota():
                if intent.namespace in self.caps:
                    return msgspec.structs.replace(intent, spec=self.quota_spec(intent.spec, intent.namespace))
            case it.RemoveQuota():
                if intent.namespace in self.caps:
                    return None
            case it.RequestAllocation():
                self.configure(intent.spec.pool, at)
        return intent


def _copy(state: ClusterState) -> ClusterState:
    return decode_snapshot(encode_snapshot(state))


_SLUG = re.compile(r"[^a-z0-9-]+")


def _added_nodes(run: _Run, at: datetime) -> list[it.RegisterNode]:
    """RegisterNode intents for the alternative's ``+N:MODEL``: copies of the first node (by name) in
    the run's pool(s) whose GPUs are of that model; raises ChangeError (field ``nodes``) when none is."""
    state, out = run.state, list[it.RegisterNode]()
    for add in run.change.add_nodes:
        template = next((n for _, n in sorted(state.nodes.items()) if run.targets(n.pool) and n.gpus
                         and all(state.gpus[g].spec.model == add.model for g in n.gpus if g in state.gpus)), None)
        if template is None:
            models = sorted({g.spec.model for g in state.gpus.values() if run.targets(g.pool)})
            raise ChangeError(f"nodes: no node of GPU model {add.model!r} in the pool at the window's start "
                              f"(models there: {', '.join(models) or 'none'})", field="nodes")
        slug = _SLUG.sub("-", add.model.lower()).strip("-")[:40] or "gpu"
        for _ in range(add.count):
            name = f"whatif-{slug}-{len(out) + 1}"
            gpus = tuple(msgspec.structs.replace(state.gpus[g].spec, name=f"{name}-{j}", uuid="")
                         for j, g in enumerate(template.gpus) if g in state.gpus)
            out.append(it.RegisterNode(intent_id="-", node=name, pool=template.pool, gpus=gpus,
                                       labels=template.labels, cpu_milli=template.cpu_milli,
                                       memory_bytes=template.memory_bytes, source="whatif"))
    return out


class Replay:
    """The synchronous core (module docstring). ``alternatives`` are applied at ``since``; ``pool``
    (None: every pool) is the pool the changes apply to and the report measures.

    Raises ChangeError (from the constructor, on the first window event) for a change that cannot
    apply: a removed node that does not exist, an added model no node has; WindowTooLarge from
    ``feed`` past ``max_intents``.
    """

    def __init__(self, *, since: datetime, until: datetime | None, pool: str | None,
                 alternatives: Sequence[Alternative], max_intents: int | None = None,
                 start: ClusterState | None = None) -> None:
        self.since, self.until, self.pool = since, until, pool
        self.alternatives = list(alternatives)
        self.max_intents = max_intents
        self.state = start or ClusterState.empty()
        self.runs: list[_Run] = []
        self.known: rebuild.Descriptions | None = None
        self.first_position = self.last_position = 0
        self.intents = self.events = self.not_replayed = 0
        self.mismatches = 0
        self.examples: list[str] = []
        self.done = False
        self._group: list[StoredEvent] = []
        self._last_at = since

    def _open(self) -> None:
        start = self.state
        self.known = rebuild.Descriptions(start)
        self.runs = [_Run(_copy(start), Alternative(), self.pool, self.since)]
        for change in self.alternatives:
            run = _Run(_copy(start), change, self.pool, self.since)
            for node in change.remove_nodes:
                found = run.state.nodes.get(node)
                if found is None or not run.targets(found.pool):
                    raise ChangeError(f"nodes: no node {node!r} in the pool at the window's start", field="nodes")
            pools = set(run.state.pools) | set(run.state.pool_nodes) | ({self.pool} if self.pool else set())
            for pool in sorted(pools):
                run.configure(pool, self.since)
            for name in run.caps:
                spec = run.state.quotas.get(name, QuotaSpec())
                run.setup(it.SetQuota(intent_id="-", namespace=name, spec=run.quota_spec(spec, name)), self.since)
            for node in change.remove_nodes:
                run.setup(it.RemoveNode(intent_id="-", node=node), self.since)
            for register in _added_nodes(run, self.since):
                run.setup(register, self.since)
            self.runs.append(run)

    def feed(self, chunk: Sequence[StoredEvent]) -> None:
        """Replay ``chunk`` (the next stored events in log order); sets ``done`` at ``until``."""
        for stored in chunk:
            if self.done:
                return
            at = stored.event.at
            if self.known is None:
                if at < self.since:
                    evolve(self.state, stored.event)
                    self.state.position = stored.position
                    continue
                self._open()
                self.first_position = stored.position
            if self._group and stored.intent_id != self._group[0].intent_id:
                self._flush()
            if self.until is not None and at >= self.until and not self._group:
                self.done = True
                return
            self._group.append(stored)

    def _flush(self) -> None:
        group, self._group = self._group, []
        assert self.known is not None
        recorded = [s.event for s in group]
        at = recorded[0].at
        self.events += len(group)
        self.last_position = group[-1].position
        self._last_at = max(self._last_at, at)
        intent = rebuild.reconstruct(group[0].intent_id, recorded, self.known)
        if intent is None:
            self.not_replayed += 1
            if not isinstance(recorded[0], ev.IntentRejected):
                self._mismatch(group, "its intent cannot be rebuilt from its events")
            return
        self.intents += 1
        if self.max_intents is not None and self.intents > self.max_intents:
            raise WindowTooLarge(f"the window holds more than {self.max_intents} intents: narrow --since/--until")
        held = isinstance(intent, it.ReleaseAllocation | it.ResizeAllocation) and \
            intent.allocation_id in self.runs[0].state.allocations
        baseline = self.runs[0].decide(intent, at)
        if baseline != recorded:
            self._mismatch(group, f"replayed {_tags(baseline)}, recorded {_tags(recorded)}")
        for run in self.runs[1:]:
            adapted = run.adapt(intent, at, held=held)
            if adapted is None:
                run.dropped += 1
            else:
                run.decide(adapted, at)

    def _mismatch(self, group: list[StoredEvent], what: str) -> None:
        self.mismatches += 1
        if len(self.examples) < MISMATCHES_SHOWN:
            self.examples.append(f"intent {group[0].intent_id} at position {group[0].position}: {what}")

    def finish(self) -> WhatIfReport:
        """Close the window (the group in progress is replayed) and build the report."""
        if self._group:
            self._flush()
        if self.known is None:
            self._open()
            self.first_position = self.last_position = self.state.position
        end = self.until if self.until is not None else self._last_at
        reports = [RunReport(name="baseline" if i == 0 else run.change.name(), changes=run.change,
                             summary=run.meter.summary(end, run.state), dropped=run.dropped,
                             series=run.meter.series) for i, run in enumerate(self.runs)]
        base = self.runs[0].meter.fates
        comparisons = [_compare(base, run.meter.fates, reports[i + 1].name) for i, run in enumerate(self.runs[1:])]
        return WhatIfReport(pool=self.pool, since=self.since, until=end, first_position=self.first_position,
                            last_position=self.last_position, intents=self.intents, events=self.events,
                            not_replayed=self.not_replayed,
                            fairness=Fairness(mismatches=self.mismatches, examples=self.examples),
                            runs=reports, comparisons=comparisons)


def _tags(events: Sequence[ev.AnyEvent]) -> str:
    return ", ".join(tag_of(e) for e in events[:6]) + (" ..." if len(events) > 6 else "") or "nothing"


def _compare(base: dict[str, Fate], other: dict[str, Fate], name: str) -> Comparison:
    differing, first = 0, list[Difference]()
    for aid, fate in base.items():
        alt = other.get(aid)
        if alt is None or fate.same(alt):
            continue
        differing += 1
        if len(first) < DIFFERENCES_SHOWN:
            first.append(Difference(allocation_id=aid, namespace=fate.namespace, pod=fate.pod, baseline=fate.text(),
                                    alternative=alt.text(), why=alt.reason or fate.reason))
    return Comparison(name=name, differing=differing, first=first)


async def _start(store: EventStore, since: datetime) -> ClusterState:
    """The newest snapshot (a store that keeps them has ``latest_snapshot``, as both adapters do) when
    its last event came before ``since``, else the empty state."""
    newest = getattr(store, "latest_snapshot", None)
    latest = await newest() if newest is not None else None
    if latest is None or latest[0] <= 0:
        return ClusterState.empty()
    position, data = latest
    async for stored in store.read(after=position - 1, limit=1):
        if stored.event.at < since:
            try:
                return decode_snapshot(data)
            except (StaleSnapshot, msgspec.DecodeError, msgspec.ValidationError):
                break  # folded from the start instead
    return ClusterState.empty()


async def whatif(store: EventStore, replay: Replay, *,
                 run_sync: Callable[[Callable[[], None]], Awaitable[None]] | None = None,
                 progress: Callable[[int, int], None] | None = None) -> WhatIfReport:
    """Drive ``replay`` over ``store``'s log: start from the newest usable snapshot, stream the events
    in chunks of CHUNK, each replayed through ``run_sync`` (default: in this thread; the reader passes
    ``asyncio.to_thread``); ``progress(position, last_position)`` after each chunk. Nothing is written.

    Raises ChangeError, WindowTooLarge, CorruptEventError (an undecodable row).
    """
    last = await store.last_position()
    replay.state = await _start(store, replay.since)
    chunk: list[StoredEvent] = []

    async def flush() -> None:
        batch = list(chunk)
        chunk.clear()
        if run_sync is None:
            replay.feed(batch)
        else:
            await run_sync(lambda: replay.feed(batch))
        if progress is not None and batch:
            progress(batch[-1].position, last)

    async for stored in store.read(after=replay.state.position, limit=last - replay.state.position):
        chunk.append(stored)
        if len(chunk) >= CHUNK:
            await flush()
            if replay.done:
                break
    await flush()
    if run_sync is None:
        return replay.finish()
    result: list[WhatIfReport] = []
    await run_sync(lambda: result.append(replay.finish()))
    return result[0]

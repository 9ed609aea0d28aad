"""The settings an alternative changes, parsed from the CLI's or the API's strings.

One :class:`Alternative` is a set of changes applied to the pool(s) of the replay: a placement
strategy, a preemption scope, namespace quota caps (``total.requests``), nodes added (copies of a
node of a GPU model already in the pool) or removed. Every parser raises :class:`ChangeError`
naming the field and the value; nothing here reads the log.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Literal, get_args

import msgspec

from events import names, quantity
from events.values import PREEMPTION_SCOPES
from services.allocator.domain import profile

Preemption = Literal["cluster", "namespace", "off"]
"""The preemption scopes a pool may have (events.values.PREEMPTION_SCOPES)."""

assert set(get_args(Preemption)) == set(PREEMPTION_SCOPES)

MAX_ADDED_NODES = 1000
"""Most nodes one ``--nodes +N:MODEL`` may add (capacity planning, not a cluster generator)."""

MAX_CHANGES = 64
"""Most quota changes, and most node changes, one what-if may carry."""


class ChangeError(ValueError):
    """A change that cannot be applied or parsed; ``field`` names the option or body field."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class QuotaCap(msgspec.Struct, frozen=True, kw_only=True):
    """A namespace's total request cap: milli-TFLOPS and bytes (None: that dimension unbounded)."""

    namespace: str
    milli_tflops: int
    vram_bytes: int | None = None


class AddNodes(msgspec.Struct, frozen=True, kw_only=True):
    """``count`` copies of a node of GPU ``model`` (its labels, CPU, memory and GPUs), never expiring."""

    count: int
    model: str


class Alternative(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What one alternative changes; the empty Alternative is the recorded settings."""

    strategy: str | None = None
    preemption: Preemption | None = None
    quotas: tuple[QuotaCap, ...] = ()
    add_nodes: tuple[AddNodes, ...] = ()
    remove_nodes: tuple[str, ...] = ()

    def name(self) -> str:
        """A short label of the changes (``strategy=fgd-strand preemption=off``), "recorded" when none."""
        parts = []
        if self.strategy is not None:
            parts.append(f"strategy={self.strategy}")
        if self.preemption is not None:
            parts.append(f"preemption={self.preemption}")
        parts += [f"quota {q.namespace}={quantity.tflops_text(q.milli_tflops)}"
                  + (f",{quantity.vram_text(q.vram_bytes)}" if q.vram_bytes is not None else "") for q in self.quotas]
        parts += [f"nodes +{a.count}:{a.model}" for a in self.add_nodes]
        parts += [f"nodes -{n}" for n in self.remove_nodes]
        return " ".join(parts) or "recorded"


_AGO = re.compile(r"(\d{1,6})([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def moment(value: str, *, field: str, now: datetime) -> datetime:
    """``value`` as an aware UTC time: a duration before ``now`` (``30m``, ``2h``, ``7d``: s, m, h, d)
    or an ISO-8601 time (UTC when it has no offset); raises ChangeError naming ``field``."""
    text = value.strip() if isinstance(value, str) else ""
    ago = _AGO.fullmatch(text)
    try:
        if ago is not None:
            return now - timedelta(seconds=int(ago[1]) * _UNIT_S[ago[2]])
        found = datetime.fromisoformat(text)
    except (ValueError, OverflowError):
        raise ChangeError(f"{field} must be a duration ago like 7d (s, m, h, d) or an ISO-8601 time like "
                          f"2026-03-01T08:00:00Z, got {str(value)[:64]!r}", field=field) from None
    return found.replace(tzinfo=UTC) if found.tzinfo is None else found.astimezone(UTC)


def strategy(value: str, *, field: str = "strategy") -> str:
    """A registered strategy name; raises ChangeError naming the known ones."""
    if value not in profile.STRATEGIES:
        raise ChangeError(f"{field} must be one of {', '.join(sorted(profile.STRATEGIES))}, got {value!r}",
                          field=field)
    return value


def preemption(value: str, *, field: str = "preemption") -> Preemption:
    """``cluster``, ``namespace`` or ``off``; raises ChangeError."""
    for scope in get_args(Preemption):
        if value == scope:
            return scope  # type: ignore[no-any-return]
    raise ChangeError(f"{field} must be one of {', '.join(PREEMPTION_SCOPES)}, got {value!r}", field=field)


def quota(value: str, *, field: str = "quota") -> QuotaCap:
    """``NS=TFLOPS[,VRAM]`` (``team-a=100``, ``team-a=100,320Gi``): the namespace's total request cap."""
    namespace, sep, amounts = value.partition("=")
    if not sep or not namespace or not amounts:
        raise ChangeError(f"{field} must be NAMESPACE=TFLOPS[,VRAM] like team-a=100,320Gi, got {value!r}", field=field)
    problem = names.problem("namespace", namespace, field=field)
    if problem:
        raise ChangeError(problem, field=field)
    tflops, _, vram = amounts.partition(",")
    try:
        milli = quantity.to_milli(tflops)
        vram_bytes = quantity.to_value(vram) if vram else None
    except quantity.QuantityError as exc:
        raise ChangeError(f"{field}: {exc} in {value!r}", field=field) from None
    if milli < 0 or (vram_bytes is not None and vram_bytes < 0) or milli > 10**15 or (vram_bytes or 0) > 2**60:
        raise ChangeError(f"{field}: amounts must be between 0 and 1e12 TFLOPS / 1 EiB, got {value!r}", field=field)
    return QuotaCap(namespace=namespace, milli_tflops=milli, vram_bytes=vram_bytes)


_ADD = re.compile(r"\+(\d{1,4}):(.{1,128})")


def nodes(value: str, *, field: str = "nodes") -> AddNodes | str:
    """``+N:MODEL`` (an AddNodes) or ``-NAME`` (the node to remove); raises ChangeError."""
    added = _ADD.fullmatch(value)
    if added is not None:
        count = int(added[1])
        if not 1 <= count <= MAX_ADDED_NODES:
            raise ChangeError(f"{field}: add 1 to {MAX_ADDED_NODES} nodes, got {value!r}", field=field)
        return AddNodes(count=count, model=added[2])
    if value.startswith("-") and len(value) > 1:
        problem = names.problem("pool", value[1:], field=field)  # a node name is a DNS subdomain, as a pool's
        if problem:
            raise ChangeError(problem, field=field)
        return value[1:]
    raise ChangeError(f"{field} must be +N:MODEL (add N nodes like one of that GPU model) or -NAME "
                      f"(remove a node), got {value!r}", field=field)


def alternatives(*, strategies: list[str], preemption_scope: str | None, quotas: list[str],
                 node_changes: list[str]) -> list[Alternative]:
    """One Alternative per strategy (one without a strategy change when none is given), each with
    the preemption, quota and node changes; raises ChangeError for any bad value or too many."""
    for field, given, most in (("quota", quotas, MAX_CHANGES), ("nodes", node_changes, MAX_CHANGES),
                               ("strategy", strategies, len(profile.STRATEGIES))):
        if len(given) > most:
            raise ChangeError(f"{field}: at most {most} values, got {len(given)}", field=field)
    scope = preemption(preemption_scope) if preemption_scope is not None else None
    caps = tuple(quota(q) for q in quotas)
    parsed = [nodes(n) for n in node_changes]
    added = tuple(p for p in parsed if isinstance(p, AddNodes))
    removed = tuple(p for p in parsed if isinstance(p, str))
    names_: list[str | None] = [strategy(s) for s in strategies] or [None]
    if len(set(names_)) != len(names_):
        raise ChangeError(f"strategy repeated: {', '.join(strategies)}", field="strategy")
    return [Alternative(strategy=s, preemption=scope, quotas=caps, add_nodes=added, remove_nodes=removed)
            for s in names_]

"""An in-memory world for engine tests: the real allocation domain (``process``) + the Engine.

Intents the engine emits are decided by the allocator's own pure domain, and the resulting
events flow back into the engine, the way the services do over NATS, with no I/O.
"""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta

from events import decisions
from events import intents as it
from events.values import AllocationSpec, GpuSpec, QuotaSpec
from services.allocator.domain import ClusterState, process
from services.autoscaler.engine import Engine
from tests.unit.autoscaler.builders import T0, gpu, sample


def autoscale_attributes(*, target: str = "all", enable: bool = True, cron: list[dict[str, object]] | None = None,
                         **auto: str) -> dict[str, str]:
    """Attributes as admission writes them, plus the JSON config with ``auto`` (camelCase) fields."""
    config = {"autoSetResources": {"enable": enable, "targetResource": target, "initialDelayPeriod": "0s", **auto},
              "cronScalingRules": cron or []}
    attrs = {"gpuledger.io/autoscaling-config": json.dumps(config)}
    if enable:
        attrs.update({"tensor-fusion.ai/autoscale": "true", "tensor-fusion.ai/autoscale-target": target})
    return attrs


def cron_rule(req: tuple[str, str], lim: tuple[str, str] | None = None, *, start: str = "0 0 * * *",
              end: str = "59 23 * * *", name: str = "boost") -> dict[str, object]:
    """A cronScalingRules entry (camelCase) wanting ``req`` (TFLOPS, VRAM) and ``lim`` (default: req)."""
    lim = lim or req
    return {"enable": True, "name": name, "start": start, "end": end,
            "desiredResources": {"requests": {"tflops": req[0], "vram": req[1]},
                                 "limits": {"tflops": lim[0], "vram": lim[1]}}}


class World:
    """Cluster state + engine; ``log`` keeps every event the domain produced."""

    def __init__(self, *, max_retries: int = 2) -> None:
        counter = itertools.count(1)
        self.state = ClusterState.empty()
        self.engine = Engine(new_id=lambda: f"resize-{next(counter)}", max_retries=max_retries)
        self.now = T0
        self.log: list[decisions.AnyEvent] = []
        self.sent: list[it.ResizeAllocation] = []
        self._ids = itertools.count(1)

    def send(self, intent: it.AnyIntent) -> list[decisions.AnyEvent]:
        """Decide one intent, feed the events to the engine, and decide any retries it answers with."""
        events = process(self.state, intent, self.now)
        self.log.extend(events)
        for event in events:
            for retry in self.engine.on_event(event, now=self.now):
                self.sent.append(retry)
                self.send(retry)
        return events

    def node(self, *gpus: GpuSpec, name: str = "node-0", pool: str = "default") -> None:
        self.send(it.RegisterNode(intent_id=f"n-{next(self._ids)}", node=name, pool=pool, gpus=gpus or (gpu(),)))

    def allocate(self, spec: AllocationSpec) -> decisions.AnyEvent:
        return self.send(it.RequestAllocation(intent_id=f"r-{next(self._ids)}", spec=spec))[0]

    def quota(self, namespace: str, spec: QuotaSpec) -> None:
        self.send(it.SetQuota(intent_id=f"q-{next(self._ids)}", namespace=namespace, spec=spec))

    def usage(self, minutes: int, *, tflops: float, vram: int, start: int = 0, allocation_id: str = "a-0",
              workload: str = "llama") -> None:
        """One sample a minute for ``minutes`` minutes from T0 + ``start`` minutes."""
        for i in range(start, start + minutes):
            self.engine.ingest(sample(allocation_id=allocation_id, workload=workload, tflops=tflops, vram=vram,
                                      at=T0 + timedelta(minutes=i)))

    def evaluate(self, at: datetime | None = None) -> list[it.ResizeAllocation]:
        """One round for every due workload; the resizes are decided at once."""
        self.now = at or self.now
        out = []
        for key in self.engine.due(self.now):
            for intent in self.engine.evaluate(key, now=self.now):
                out.append(intent)
                self.sent.append(intent)
                self.send(intent)
        return out

    def of_type(self, kind: type) -> list[decisions.AnyEvent]:
        return [e for e in self.log if isinstance(e, kind)]

"""CLI commands for an allocation's life after ``submit``, through the allocator's HTTP API:
``release``, ``resize``, ``queue`` (waiting requests in grant order, each with its current reason)
and ``why`` (the live explanation of one allocation). ``events`` (the committed stream) lives in
services.cli.events_command.

An allocation is named by its id (the pod UID) or as ``NAMESPACE/POD`` (its live allocation).
Exit codes: 0 done, 1 stack unreachable or other failure, 2 bad input or no live allocation (the
message says how it ended, when it did), 3 (``why``) still queued, 4 the allocator rejected the
change (``resize``). ``why`` of an allocation that ended prints how (released, preempted, rejected),
when and why, and exits 0.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from services.cli import client, output
from services.cli.exits import DataDir, JsonOut, guarded
from services.cli.output import BadInput

Target = Annotated[str, typer.Argument(metavar="ALLOCATION|NAMESPACE/POD",
                                       help="Allocation id (pod UID) or NAMESPACE/POD of a live allocation.")]


class NotLive(BadInput):
    """No live allocation for the target (exit 2); ``ended`` says how its last life ended
    (released, preempted, rejected: the API's ``ended``), None when it never existed."""

    def __init__(self, message: str, *, ended: dict[str, Any] | None) -> None:
        super().__init__(message, field="ALLOCATION")
        self.ended = ended


def find_allocation(api: client.Api, target: str) -> dict[str, Any]:
    """The live allocation named by ``target`` (an id, or ``NAMESPACE/POD``); NotLive when none,
    BadInput when ``target`` is blank or a half of ``NAMESPACE/POD`` is missing."""
    if not target.strip():
        raise BadInput("expected an allocation id or NAMESPACE/POD, got an empty value", field="ALLOCATION")
    if "/" in target:
        namespace, _, pod = target.partition("/")
        if not namespace or not pod:
            raise BadInput(f"expected NAMESPACE/POD, got {target!r}", field="ALLOCATION")
        found = list(api.items("/api/v1/allocations", namespace=namespace, pod=pod))
        live = [a for a in found if a.get("status") in ("granted", "queued")] or found
        if live:
            return live[0]
    try:  # an id; or a pod with no live allocation, whose newest life the API finds by NAMESPACE/POD
        answer: dict[str, Any] = api.get(f"/api/v1/allocations/{client.quoted(target)}")
        return answer
    except client.ApiError as exc:
        if exc.status != 404:
            raise
        ended = (exc.body or {}).get("ended")
        raise NotLive(str(exc), ended=ended if isinstance(ended, dict) else None) from None


def release(target: Target,
            data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Release an allocation.

    Releases a granted allocation or withdraws a queued request (what deleting the pod does)."""

    def body() -> None:
        api = client.connect(data_dir)
        allocation = find_allocation(api, target)
        answer = api.request("DELETE", f"/api/v1/allocations/{client.quoted(allocation['allocation_id'])}")
        if as_json:
            output.emit_json(answer)
            return
        what = "withdrawn" if allocation.get("status") == "queued" else "released"
        typer.echo(f"{what}: {allocation.get('namespace')}/{allocation.get('pod')} "
                   f"(allocation {allocation['allocation_id']})")

    guarded(as_json, body)


def resize(target: Target,
           tflops: Annotated[str | None, typer.Option("--tflops", help="New TFLOPS request per GPU (e.g. 20).")]
           = None,
           vram: Annotated[str | None, typer.Option("--vram", help="New VRAM request per GPU (e.g. 8Gi).")] = None,
           tflops_limit: Annotated[str | None, typer.Option("--tflops-limit", help="New TFLOPS limit per GPU.")]
           = None,
           vram_limit: Annotated[str | None, typer.Option("--vram-limit", help="New VRAM limit per GPU.")] = None,
           data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Resize an allocation.

    Changes a granted allocation's per-GPU request and limit in place (values not given are kept,
    the limit too: a request above the kept limit is refused; TensorFusion AdjustAllocation). Exit 4
    when it does not fit, with the largest request that would and what its GPUs have available
    (TensorFusion's remain)."""

    def body() -> None:
        for value, field in ((tflops, "tflops"), (vram, "vram"), (tflops_limit, "tflops-limit"),
                             (vram_limit, "vram-limit")):
            if value is not None and (output.quantity(value) is None or (output.quantity(value) or 0) < 0):
                raise BadInput(f"--{field} must be a quantity like 20, 500m or 8Gi, got {value!r}", field=field)
        if tflops is vram is tflops_limit is vram_limit is None:
            raise BadInput("give at least one of --tflops, --vram, --tflops-limit, --vram-limit", field="tflops")
        api = client.connect(data_dir)
        allocation = find_allocation(api, target)
        given = {"request": {k: v for k, v in (("tflops", tflops), ("vram", vram)) if v is not None},
                 "limit": {k: v for k, v in (("tflops", tflops_limit), ("vram", vram_limit)) if v is not None}}
        answer = api.request("POST", f"/api/v1/allocations/{client.quoted(allocation['allocation_id'])}/resize",
                             body={side: values for side, values in given.items() if values})
        request, limit = ({**{k: v for k, v in (allocation.get(side) or {}).items()
                              if not (k == "compute_percent" and "tflops" in given[side])}, **given[side]}
                          for side in ("request", "limit"))
        rejected = isinstance(answer, dict) and str(answer.get("type", "")).endswith("rejected")
        if as_json:
            output.emit_json(answer)
        elif rejected:
            typer.echo(f"resize rejected: {answer.get('reason', '')}")
            if answer.get("max_request"):
                typer.echo(f"  largest request that fits: {output.request_text(answer['max_request'])}")
            if answer.get("remain"):
                typer.echo(f"  available on its GPUs now: {output.request_text(answer['remain'])}")
        else:
            typer.echo(f"resized {allocation.get('namespace')}/{allocation.get('pod')}: request "
                       f"{output.request_text(request)}, limit {output.request_text(limit, unset=True)}")
        if rejected:
            raise typer.Exit(output.REJECTED)

    guarded(as_json, body)


def queue(pool: Annotated[str | None, typer.Option("--pool", help="Only this pool.")] = None,
          namespace: Annotated[str | None, typer.Option("--namespace", help="Only this namespace.")] = None,
          limit: Annotated[int, typer.Option("--limit", min=0, help="At most this many (0: all).")] = 0,
          data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """List waiting requests.

    In the order they would be granted, each with its current reason; in a pool
    with shares, also which share is ahead of it and by how much."""

    def body() -> None:
        from services.cli.admin_commands import known_pool

        api = client.connect(data_dir)
        known_pool(api, pool)
        rows = list(api.items("/api/v1/queue", limit=limit, pool=pool, namespace=namespace))
        if as_json:
            output.emit_json(rows)
            return
        output.table(("#", "namespace", "pod", "pool", "QoS", "request", "waiting since", "reason"),
                     [[str(r.get("rank", i - 1) + 1), r.get("namespace", ""), r.get("pod", ""), r.get("pool", ""),
                       r.get("qos", ""),
                       output.request_text(r.get("request")), (r.get("requested_at") or "")[:19].replace("T", " "),
                       _with_fair_share(r)] for i, r in enumerate(rows, 1)],
                     title=f"queue ({len(rows)} waiting)")

    guarded(as_json, body)


def _with_fair_share(row: dict[str, Any]) -> str:
    """A waiting request's reason, and in a pool with shares which share is ahead of it."""
    standing = row.get("fair_share")
    text = standing.get("text") if isinstance(standing, dict) else None
    return f"{row.get('reason', '')}; {text}" if text else str(row.get("reason", ""))


def why(target: Target, data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Explain an allocation.

    Why it is where it is now: its status, the current reason, the filters that
    removed GPUs, the quota dimension that blocks it and what would have to free up. Exit 3 while
    it is queued."""

    def body() -> None:
        api = client.connect(data_dir)
        try:
            allocation = find_allocation(api, target)
        except NotLive as exc:
            if exc.ended is None:
                raise
            _print_ended(exc.ended, as_json=as_json)
            return
        if "explanation" not in allocation:
            allocation = api.get(f"/api/v1/allocations/{client.quoted(allocation['allocation_id'])}")
        if as_json:
            output.emit_json(allocation)
        else:
            _print_why(allocation)
        if allocation.get("status") == "queued":
            raise typer.Exit(output.QUEUED)

    guarded(as_json, body)


def _print_why(allocation: dict[str, Any]) -> None:
    output.lines([("allocation", allocation.get("allocation_id", "")),
                  ("pod", f"{allocation.get('namespace', '')}/{allocation.get('pod', '')}"),
                  ("pool", allocation.get("pool", "")), ("status", allocation.get("status", "")),
                  ("request", output.request_text(allocation.get("request"))),
                  ("limit", output.request_text(allocation.get("limit"), unset=True)),
                  ("node", allocation.get("node") or "-"), ("GPUs", ", ".join(allocation.get("gpus") or []) or "-"),
                  ("reason", allocation.get("reason") or "-")])
    for line in output.device_lines(allocation.get("device")):
        typer.echo(line)
    explanation = allocation.get("explanation")
    if isinstance(explanation, dict):
        _print_tree(explanation, indent="  ")
    elif explanation:
        typer.echo(f"  {explanation}")


def _print_ended(ended: dict[str, Any], *, as_json: bool) -> None:
    """How a no-longer-live allocation ended (``why`` of a released, preempted or rejected one)."""
    if as_json:
        output.emit_json(ended)
        return
    extra = [(k, str(ended[k])) for k in ("code", "preemptor") if ended.get(k)]
    output.lines([("allocation", ended.get("allocation_id", "")),
                  ("pod", f"{ended.get('namespace', '')}/{ended.get('pod', '')}"), ("pool", ended.get("pool", "")),
                  ("status", ended.get("status", "")),
                  ("ended at", str(ended.get("ended_at") or "-").replace("T", " ")[:19]), *extra,
                  ("reason", ended.get("reason") or "-")])


_QUANTITY_KEYS = {"tflops": output.tflops, "vram": output.vram, "compute_percent": output.percent}
"""Keys of an explanation whose values are canonical quantity strings, shown in TFLOPS / GiB / %."""


def _shown(key: str, item: Any) -> Any:
    shown = _QUANTITY_KEYS.get(key)
    return shown(str(item)) if shown is not None and isinstance(item, str | int) else item


def _print_tree(value: dict[str, Any], *, indent: str) -> None:
    """An explanation as indented ``key: value`` lines, quantities in human units (``charges:
    - 133.7 TFLOPS, 18.6 GiB``), never the canonical ``133714m`` / ``19531250Ki`` of ``--json``."""
    for key, item in value.items():
        if isinstance(item, dict):
            typer.echo(f"{indent}{key}:")
            _print_tree(item, indent=indent + "  ")
        elif isinstance(item, list) and item and all(isinstance(x, dict) for x in item):
            typer.echo(f"{indent}{key}:")
            for entry in item:
                typer.echo(f"{indent}  - " + ", ".join(
                    str(_shown(k, v)) if k in _QUANTITY_KEYS else f"{k} {v}" for k, v in entry.items()))
        elif item not in (None, "", [], {}):
            typer.echo(f"{indent}{key}: {', '.join(map(str, item)) if isinstance(item, list) else _shown(key, item)}")


def register(app: typer.Typer) -> None:
    """Add ``release``, ``resize``, ``queue`` and ``why`` to ``app``."""
    for command in (release, resize, queue, why):
        app.command(epilog=output.EXIT_CODES_HELP)(command)

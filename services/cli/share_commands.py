"""CLI commands for shares (docs/shares.md) through the allocator's HTTP API: ``shares list``,
``shares show NAME``, ``shares set NAME ...`` and ``shares remove NAME``.

A share is a named group of namespaces with a guarantee per pool and resource, optional borrowing
and lending limits and a weight (KAI queue, Kueue ClusterQueue; not the queue of waiting requests,
``gpuledger queue``). Amounts are ``RESOURCE=QUANTITY`` pairs joined by commas: ``tflops`` (a
decimal quantity), ``vram`` (bytes: ``80Gi``), ``gpus`` (a whole number).

Every command takes ``--data-dir`` and ``--json``. Exit codes: 0 done, 1 unreachable/other, 2 bad
input (``{"error", "field"}``; also the allocator's refusal of a share that does not fit the
others, which names the field), 4 rejected.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from services.cli import client, output
from services.cli.exits import DataDir, JsonOut, guarded
from services.cli.output import BadInput

RESOURCES = ("tflops", "vram", "gpus")
"""The resources of an amount, in the order they are printed."""
_LIMIT_OPTIONS = {"guaranteed": "guarantee", "borrowing_limit": "borrow-limit", "lending_limit": "lend-limit"}


def parse_amount(text: str, *, option: str) -> dict[str, Any]:
    """``tflops=100,vram=80Gi,gpus=4`` -> ``{"tflops": "100", "vram": "80Gi", "gpus": 4}`` (the API's
    amount shape); each resource at most once, quantities non-negative. BadInput naming ``option``
    and the offending part otherwise."""
    amount: dict[str, Any] = {}
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise BadInput(f"--{option} must be RESOURCE=QUANTITY pairs joined by commas, such as "
                       f"tflops=100,vram=80Gi,gpus=4; got {text!r}", field=option)
    for part in parts:
        key, sep, value = (s.strip() for s in part.partition("="))
        key = key.lower()
        if not sep or key not in RESOURCES:
            raise BadInput(f"--{option}: {part!r} is not RESOURCE=QUANTITY with RESOURCE one of "
                           f"{', '.join(RESOURCES)}", field=option)
        if key in amount:
            raise BadInput(f"--{option}: {key} is given twice", field=option)
        if key == "gpus":
            if not value.isdigit():
                raise BadInput(f"--{option}: gpus must be a whole number of GPUs, got {value!r}", field=option)
            amount[key] = int(value)
            continue
        number = output.quantity(value)
        if number is None or number < 0:
            example = "80Gi" if key == "vram" else "100 or 500m"
            raise BadInput(f"--{option}: {key} must be a non-negative quantity such as {example}, got {value!r}",
                           field=option)
        amount[key] = value
    return amount


def share_body(*, namespaces: list[str], pool: str | None, guarantee: str | None, borrow_limit: str | None,
               lend_limit: str | None, weight: int, parent: str | None,
               kept: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The PUT /api/v1/shares/{name} body of ``shares set`` (checked: names, amounts, a pool when
    an amount is given); ``kept``: terms in other pools to keep (``--keep-pools``)."""
    for i, namespace in enumerate(namespaces):
        output.kube_name("namespace", namespace, field="namespace")
        if namespace in namespaces[:i]:
            raise BadInput(f"--namespace {namespace} is given twice", field="namespace")
    if parent:
        output.kube_name("share", parent, field="parent")
    amounts = {"guaranteed": guarantee, "borrowing_limit": borrow_limit, "lending_limit": lend_limit}
    given = {key: parse_amount(text, option=_LIMIT_OPTIONS[key]) for key, text in amounts.items() if text is not None}
    if given and pool is None:
        raise BadInput("--pool is required with --guarantee, --borrow-limit or --lend-limit (the pool they "
                       "apply to)", field="pool")
    pools = [p for p in (kept or []) if p.get("pool") != pool]
    if pool is not None:
        output.kube_name("pool", pool, field="pool")
        pools.append({"pool": pool, **given})
    body: dict[str, Any] = {"namespaces": namespaces, "weight": weight, "pools": pools}
    if parent:
        body["parent"] = parent
    return body


def _api(data_dir: Any) -> client.Api:
    return client.connect(data_dir)


def shares_set(
    name: Annotated[str, typer.Argument(help="Share name (a Kubernetes object name: lowercase, digits, '-', '.').")],
    namespace: Annotated[list[str] | None, typer.Option(
        "--namespace", "-n", help="A namespace charged to the share (repeat for several; none for a parent).")] = None,
    pool: Annotated[str | None, typer.Option("--pool", help="The pool the amounts apply to.")] = None,
    guarantee: Annotated[str | None, typer.Option(
        "--guarantee", help="Guaranteed amount, e.g. tflops=100,vram=80Gi,gpus=4 (a resource left out: 0).")] = None,
    borrow_limit: Annotated[str | None, typer.Option(
        "--borrow-limit", help="Most it may use beyond its guarantee (same form; absent: unbounded).")] = None,
    lend_limit: Annotated[str | None, typer.Option(
        "--lend-limit", help="Most of its unused guarantee others may borrow (same form; absent: all).")] = None,
    weight: Annotated[int, typer.Option("--weight", min=1, max=1000,
                                        help="Weight in the division of the surplus, 1 to 1000.")] = 1,
    parent: Annotated[str | None, typer.Option("--parent", help="The parent share (one level: department).")] = None,
    keep_pools: Annotated[bool, typer.Option(
        "--keep-pools", help="Keep the share's terms in its other pools (default: set replaces the whole share).")]
    = False,
    data_dir: DataDir = None,
    as_json: JsonOut = False,
) -> None:
    """Create or replace a share.

    Sets NAME's namespaces, parent, weight and its terms in --pool; the whole share is replaced
    (with --keep-pools its terms in other pools stay)."""

    def body() -> None:
        output.kube_name("share", name, field="NAME")

        def build(kept: list[dict[str, Any]] | None) -> dict[str, Any]:
            return share_body(namespaces=list(namespace or []), pool=pool, guarantee=guarantee,
                              borrow_limit=borrow_limit, lend_limit=lend_limit, weight=weight, parent=parent, kept=kept)

        sent = build(None)  # checked before any stack is contacted
        api = _api(data_dir)
        if keep_pools:
            try:
                kept = api.get(f"/api/v1/shares/{client.quoted(name)}").get("spec", {}).get("pools") or []
            except client.ApiError as exc:
                if exc.status != 404:
                    raise
                kept = []
            sent = build(kept)
        answer = api.request("PUT", f"/api/v1/shares/{client.quoted(name)}", body=sent)
        if as_json:
            output.emit_json(answer)
        else:
            typer.echo(f"share {name} set")
        if isinstance(answer, dict) and str(answer.get("type", "")).endswith("_rejected"):
            raise typer.Exit(output.REJECTED)

    guarded(as_json, body)


def figure_text(figure: dict[str, Any] | None) -> str:
    """``400 TFLOPS, 320 GiB, 4 GPUs`` for a figure or terms amount (``-`` when absent; a resource not
    set in terms is left out)."""
    if not figure:
        return "-"
    parts = []
    if figure.get("tflops") is not None:
        parts.append(output.tflops(figure["tflops"]))
    if figure.get("vram") is not None:
        parts.append(output.vram(figure["vram"]))
    if figure.get("gpus") is not None:
        parts.append(f"{figure['gpus']:g} GPUs" if isinstance(figure["gpus"], float) else f"{figure['gpus']} GPUs")
    return ", ".join(parts) or "-"


def share_rows(shares: list[dict[str, Any]]) -> list[list[str]]:
    """One table row per share and pool: share (``parent/child``), pool, guaranteed, used, borrowed,
    lent, fair share, waiting."""
    rows = []
    for share in shares:
        label = f"{share['parent']}/{share['name']}" if share.get("parent") else share.get("name", "")
        for pool in share.get("pools") or []:
            rows.append([label, pool.get("pool", ""), figure_text(pool.get("guaranteed")),
                         figure_text(pool.get("used")), figure_text(pool.get("borrowed")),
                         figure_text(pool.get("lent")), figure_text(pool.get("fair_share")),
                         str(pool.get("waiting", 0))])
        if not share.get("pools"):
            rows.append([label, "-", "-", "-", "-", "-", "-", "0"])
    return rows


COLUMNS = ("share", "pool", "guaranteed", "used", "borrowed", "lent", "fair share", "waiting")


def shares_list(pool: Annotated[str | None, typer.Option("--pool", help="Only this pool.")] = None,
                data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """List shares.

    Every share per pool: guaranteed, used, borrowed, lent, fair share and waiting requests."""

    def body() -> None:
        if pool is not None:
            output.kube_name("pool", pool, field="pool")
        rows = list(_api(data_dir).items("/api/v1/shares", pool=pool))
        if as_json:
            output.emit_json(rows)
            return
        output.table(COLUMNS, share_rows(rows), title=f"shares ({len(rows)})")

    guarded(as_json, body)


def shares_show(name: Annotated[str, typer.Argument(help="Share name.")],
                data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Show one share.

    Its namespaces, parent, children, weight, and per pool its terms and figures."""

    def body() -> None:
        output.kube_name("share", name, field="NAME")
        share = _api(data_dir).get(f"/api/v1/shares/{client.quoted(name)}")
        if as_json:
            output.emit_json(share)
            return
        output.lines([("share", share.get("name", name)), ("parent", share.get("parent") or "-"),
                      ("children", ", ".join(share.get("children") or []) or "-"),
                      ("namespaces", ", ".join(share.get("namespaces") or []) or "-"),
                      ("weight", share.get("weight", 1))])
        for pool in share.get("pools") or []:
            output.lines([("pool", pool.get("pool", "")),
                          ("  guaranteed", figure_text(pool.get("guaranteed"))),
                          ("  borrowing limit", figure_text(pool.get("borrowing_limit"))
                           if pool.get("borrowing_limit") else "unbounded"),
                          ("  lending limit", figure_text(pool.get("lending_limit"))
                           if pool.get("lending_limit") else "all of its unused guarantee"),
                          ("  used", figure_text(pool.get("used"))), ("  borrowed", figure_text(pool.get("borrowed"))),
                          ("  lent", figure_text(pool.get("lent"))),
                          ("  fair share", figure_text(pool.get("fair_share"))),
                          ("  standing", pool.get("standing") or "-"),
                          ("  below guarantee in", ", ".join(pool.get("below_guarantee") or []) or "-"),
                          ("  above guarantee in", ", ".join(pool.get("above_guarantee") or []) or "-"),
                          ("  waiting", pool.get("waiting", 0))])

    guarded(as_json, body)


def shares_remove(name: Annotated[str, typer.Argument(help="Share whose definition goes.")],
                  data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Remove a share.

    Its namespaces are in no share afterwards. Refused (exit 2, naming them) while it is a parent."""

    def body() -> None:
        output.kube_name("share", name, field="NAME")
        answer = _api(data_dir).request("DELETE", f"/api/v1/shares/{client.quoted(name)}")
        if as_json:
            output.emit_json(answer)
        else:
            typer.echo(f"share {name} removed")

    guarded(as_json, body)


def register(app: typer.Typer) -> None:
    """Add ``shares`` to ``app`` (the API calls are made when a command runs)."""
    shares = typer.Typer(help="Shares: guaranteed GPU capacity per pool for groups of namespaces, borrowing and "
                              "fair share (docs/shares.md). Not the queue of waiting requests (`gpuledger queue`).",
                         no_args_is_help=True, rich_markup_mode=None)
    shares.command("list")(shares_list)
    shares.command("show")(shares_show)
    shares.command("set")(shares_set)
    shares.command("remove")(shares_remove)
    app.add_typer(shares, name="shares")

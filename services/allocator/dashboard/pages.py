"""The dashboard's routes (an aiohttp sub-application mounted at ``/ui`` on a reader's app, ``gpuledger api``).

``GET /ui/`` Cluster, ``/ui/queue`` Queue, ``/ui/shares`` Shares (docs/shares.md), ``/ui/allocations/{id}``
Allocation (``/ui/allocations?id=`` jumps there), ``/ui/nodes/{name}`` Node, ``/ui/quality`` Placement quality,
``/ui/defrag`` Defrag (``?pool=&max_moves=``: a pool's running or last campaign and its plan, dry run),
``/ui/live.json`` ``{"position", "role", "head", "lag"}`` (what the page script polls to refresh in place),
``/ui/static/*`` the CSS and the script. Bad query values answer 400 naming the field; unknown
nodes and allocations 404. The Cluster and Placement-quality pages, the costly ones, are rendered at
most once a second per path and query (``recent``). Everything reads the reader's own projection through ``reads``,
an allocation's events through ``lives`` (the History port), and the quality series from memory
(``timeline``, kept as the projection folds; its start-up backfill runs in the background).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import asyncpg
import structlog
from aiohttp import web

from events.defrag import MAX_DEFRAG_MOVES
from services.allocator.api import defrag as defrag_api
from services.allocator.api import lives
from services.allocator.api.follower import Follower
from services.allocator.dashboard import auth, reads, render
from services.allocator.dashboard.recent import RecentPages
from services.allocator.dashboard.timeline import QualityTimeline
from services.allocator.domain.consolidation import Budget
from services.allocator.domain.consolidation import plan as plan_of
from services.allocator.domain.scheduler import Scheduler
from services.allocator.ports import CorruptEventError, History

log = structlog.get_logger(__name__)

FOLLOWER = web.AppKey("dashboard_follower", Follower)
HISTORY = web.AppKey("dashboard_history", History)
TIMELINE = web.AppKey("dashboard_timeline", QualityTimeline)
BACKFILL = web.AppKey("dashboard_backfill", asyncio.Task[None])
RECENT = web.AppKey("dashboard_recent", RecentPages)
"""The Cluster and Placement-quality pages rendered in the last second (``recent``)."""
BACKFILL_RETRY_S = 5.0
"""Seconds between two tries of the quality series' start-up backfill when the log cannot be read."""

MAX_PER_PAGE = 2000
"""Most nodes on one page of the GPU map."""
NODES_PER_PAGE = 250
QUEUE_PER_PAGE = 100
QUALITY_TABLE_ROWS = 240
"""Newest samples listed in the quality page's table (the chart draws all of them)."""
MAX_NAME = 512
"""Longest node name or allocation id accepted in a URL."""


class BadQuery(ValueError):
    """A query value is not acceptable; ``field`` names it."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


def _int(request: web.Request, name: str, default: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= high:
        raise BadQuery(f"{name} must be a whole number from 1 to {high}, got {raw[:40]!r}", field=name)
    return int(raw)


def _name(request: web.Request, key: str) -> str:
    value = request.match_info[key]
    if len(value) > MAX_NAME:
        raise BadQuery(f"{key} is longer than {MAX_NAME} characters", field=key)
    return value


def _common(follower: Follower, active: str) -> dict[str, Any]:
    return {"position": follower.state.position, "role": "reader", "active": active}


async def cluster(request: web.Request) -> web.Response:
    """Pools (capacity, used, free, quality) and the GPU map, filtered and paged by node."""
    follower = request.app[FOLLOWER]
    started = time.perf_counter()
    query = request.query
    flt = reads.MapFilter(pool=query.get("pool", ""), model=query.get("model", ""),
                          node=query.get("node", ""), show=query.get("show", ""))
    if flt.show not in reads.SHOW:
        raise BadQuery(f"show must be one of {', '.join(s for s in reads.SHOW if s)}, got {flt.show[:40]!r}",
                       field="show")
    number = _int(request, "page", 1, 10**6)
    per_page = _int(request, "per_page", NODES_PER_PAGE, MAX_PER_PAGE)
    state = follower.state
    groups = list(reads.gpu_map(state, flt))
    shown = groups[(number - 1) * per_page:number * per_page]
    return render.page(
        "cluster.html", **_common(follower, "cluster"), pools=reads.pools(state), models=reads.models(state),
        flt=flt, groups=shown, nodes_total=len(groups), gpus_total=sum(len(g.cells) for g in groups),
        gpus_shown=sum(len(g.cells) for g in shown), page=number, per_page=per_page,
        pages=max(1, -(-len(groups) // per_page)), show_values=reads.SHOW,
        built_ms=1000 * (time.perf_counter() - started))


async def queue(request: web.Request) -> web.Response:
    """Queued requests in grant order with their stored reason and the live explanation."""
    follower = request.app[FOLLOWER]
    number = _int(request, "page", 1, 10**6)
    waiting, total = reads.queue(follower.state, offset=(number - 1) * QUEUE_PER_PAGE, limit=QUEUE_PER_PAGE)
    return render.page("queue.html", **_common(follower, "queue"), waiting=waiting, total=total, page=number,
                       pages=max(1, -(-total // QUEUE_PER_PAGE)))


async def shares(request: web.Request) -> web.Response:
    """Every share per pool: guaranteed, used (a bar against the guarantee), borrowed, lent, fair
    share and waiting requests (services.allocator.api.share_status)."""
    follower = request.app[FOLLOWER]
    return render.page("shares.html", **_common(follower, "shares"), rows=reads.shares(follower.state))


async def find_allocation(request: web.Request) -> web.Response:
    """``?id=`` -> 303 to that allocation's page."""
    wanted = request.query.get("id", "").strip()
    if not wanted or len(wanted) > MAX_NAME:
        raise BadQuery(f"id must be an allocation id of 1 to {MAX_NAME} characters", field="id")
    raise web.HTTPSeeOther(f"{auth.PREFIX}/allocations/{quote(wanted, safe='')}")


async def allocation(request: web.Request) -> web.Response:
    """One allocation: its live record (if granted or queued) and every event of it in the log."""
    follower = request.app[FOLLOWER]
    allocation_id = _name(request, "id")
    live = reads.allocation(follower.state, allocation_id)
    steps = lives.steps(await lives.events_of(request.app[HISTORY], allocation_id))
    if live is None and not steps:
        return render.problem(f"no allocation {allocation_id!r} in the log", field="id", status=404)
    return render.page("allocation.html", **_common(follower, "allocation"), allocation_id=allocation_id,
                       live=live, steps=steps, limit=lives.MAX_STEPS)


async def node(request: web.Request) -> web.Response:
    """One node: phase, heartbeat, labels, its GPUs and the allocations placed on it."""
    follower = request.app[FOLLOWER]
    name = _name(request, "name")
    record = reads.node(follower.state, name)
    if record is None:
        return render.problem(f"no node {name!r} in the projection", field="name", status=404)
    gpus = reads.node_gpus(follower.state, record)
    return render.page("node.html", **_common(follower, "node"), node=record, gpus=gpus,
                       shares={g.name: reads.used_share(g) for g in gpus},
                       classes={g.name: reads.share_class(reads.used_share(g)) for g in gpus},
                       allocations=reads.allocations_on(follower.state, name))


async def quality(request: web.Request) -> web.Response:
    """Unallocated % and fragmentation % of each pool now, and over time (from memory, no log read)."""
    follower = request.app[FOLLOWER]
    timeline = request.app[TIMELINE]
    samples = timeline.series(follower.state)
    names = sorted({pool for s in samples for pool in s.pools})
    series = {pool: [s.pools.get(pool, reads.Quality()) for s in samples] for pool in names}
    lines = {pool: {"unallocated": render.polyline([q.unallocated_pct for q in qs]),
                    "fragmentation": render.polyline([q.fragmentation_pct for q in qs])}
             for pool, qs in series.items()}
    return render.page("quality.html", **_common(follower, "quality"), pools=reads.pools(follower.state),
                       samples=samples, lines=lines, phase=timeline.phase, backfilled=timeline.position,
                       note=timeline.note, table_rows=QUALITY_TABLE_ROWS)


async def defrag(request: web.Request) -> web.Response:
    """Defrag: per pool (``?pool=`` one), its running or last campaign (open moves with their reserved
    targets, closed ones) and its consolidation plan now, dry run, within ``?max_moves=`` (default 10)."""
    follower = request.app[FOLLOWER]
    state = follower.state
    wanted = request.query.get("pool", "")
    max_moves = _int(request, "max_moves", defrag_api.DEFAULT_MOVES, MAX_DEFRAG_MOVES)
    names = sorted(set(state.pool_nodes) | set(state.campaigns))
    if wanted and wanted not in names:
        raise BadQuery(f"pool {wanted[:64]!r} has no nodes and no defrag campaign", field="pool")
    now = datetime.now(UTC)
    shown = []
    for pool in ([wanted] if wanted else names):
        campaign = state.campaigns.get(pool)
        plan = (defrag_api.plan_doc(plan_of(state, pool, Budget(max_moves=max_moves), now, Scheduler()))
                if pool in state.pool_nodes else None)
        shown.append({"pool": pool, "campaign": defrag_api.campaign_doc(campaign) if campaign else None,
                      "plan": plan, "schedule": state.pool_config(pool).defrag})
    return render.page("defrag.html", **_common(follower, "defrag"), pools=shown, pool_names=names, wanted=wanted,
                       max_moves=max_moves)


async def live(request: web.Request) -> web.Response:
    """``{"position", "role", "head", "lag"}``: the page script refreshes when the position moves."""
    follower = request.app[FOLLOWER]
    return web.json_response({"position": follower.state.position, "role": "reader", "head": follower.head,
                              "lag": follower.lag}, headers={"Cache-Control": "no-store"})


@web.middleware
async def _problems(request: web.Request, handler: auth.Handler) -> web.StreamResponse:
    """BadQuery -> 400 naming the field; the event log unreachable or unreadable -> 503."""
    try:
        return await handler(request)
    except BadQuery as exc:
        return render.problem(str(exc), field=exc.field)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, CorruptEventError) as exc:
        log.warning("dashboard could not read the event log", path=request.path, error=repr(exc))
        return render.problem(f"the event log cannot be read now ({type(exc).__name__}); try again",
                              field="", status=503)


async def _backfill(follower: Follower, timeline: QualityTimeline) -> None:
    """Attach the quality series to the reader's projection; a log that cannot be read is retried
    every BACKFILL_RETRY_S seconds, anything else is logged and leaves the series empty."""
    while True:
        try:
            await timeline.attach(follower)
            return
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, CorruptEventError) as exc:
            log.warning("the quality series could not read the log; retrying", error=repr(exc)[:512])
            await asyncio.sleep(BACKFILL_RETRY_S)
        except Exception:
            log.exception("the quality series could not be built")
            return


async def _start_backfill(app: web.Application) -> None:
    app[BACKFILL] = asyncio.create_task(_backfill(app[FOLLOWER], app[TIMELINE]))


async def _stop_backfill(app: web.Application) -> None:
    task = app.get(BACKFILL)
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def build(follower: Follower, history: History, *, token: str | None = None) -> web.Application:
    """The dashboard sub-application over a reader's projection ``follower`` and the log's
    ``history``; ``token`` defaults to GPULEDGER_API_TOKEN."""
    secret = os.environ.get("GPULEDGER_API_TOKEN", "") if token is None else token
    app = web.Application(middlewares=[auth.middleware(secret), _problems])
    app[FOLLOWER] = follower
    app[HISTORY] = history
    app[TIMELINE] = timeline = QualityTimeline()
    follower.steps.append(timeline.observe)
    app.on_startup.append(_start_backfill)
    app.on_cleanup.append(_stop_backfill)
    app[RECENT] = recent = RecentPages()
    app.router.add_get("/", recent.serving(cluster))
    app.router.add_get("/queue", queue)
    app.router.add_get("/shares", shares)
    app.router.add_get("/allocations", find_allocation)
    app.router.add_get("/allocations/{id:.+}", allocation)  # an id NAMESPACE/POD may come unencoded
    app.router.add_get("/nodes/{name}", node)
    app.router.add_get("/quality", recent.serving(quality))
    app.router.add_get("/defrag", defrag)
    app.router.add_get("/live.json", live)
    app.router.add_static("/static/", render.STATIC)
    return app


def mount(app: web.Application, follower: Follower, history: History, *, token: str | None = None) -> None:
    """Serve the dashboard under ``/ui/`` of ``app`` (a reader's HTTP app); ``token`` as in
    :func:`build` (pass the API's, so both take the same one)."""
    app.add_subapp(auth.PREFIX, build(follower, history, token=token))

"""A pool's defrag schedule: its validation and its latest due tick (pure: ``now`` is passed in).

TensorFusion api/v1 NodeDefragConfig: a 5-field cron ``schedule`` evaluated in an explicit IANA
``timezone`` (no ``CRON_TZ=`` prefix), a ``maxDuration`` window; a campaign is due for the latest
tick within the window (internal/controller/gpupool_defrag.go ``selectDefragCampaign``). Evaluated
with the ``cronsim`` library, as the autoscaler's cron rules are (services/autoscaler/cron.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from events.defrag import MAX_DEFRAG_DURATION_S, MAX_DEFRAG_MOVES
from events.values import DefragSchedule


def check_schedule(schedule: DefragSchedule) -> tuple[str, str, str] | None:
    """``(field, value, reason)`` for a schedule that cannot run: a cron expression that is not 5
    fields or has a ``TZ=`` prefix (TensorFusion: use ``timezone``), an unknown time zone, a
    duration outside 1 s-24 h, a budget out of range; else None."""
    expr = schedule.schedule.strip()
    if len(expr.split()) != 5 or "=" in expr or expr.startswith("@"):
        return "config.defrag.schedule", expr[:64], (
            f"defrag schedule must be a 5-field cron expression (minute hour day month weekday), got {expr[:64]!r}")
    try:
        CronSim(expr, datetime(2026, 1, 1, tzinfo=ZoneInfo("UTC")))
    except CronSimError as exc:
        return "config.defrag.schedule", expr[:64], f"defrag schedule {expr[:64]!r} is invalid: {exc}"
    try:
        ZoneInfo(schedule.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return "config.defrag.timezone", schedule.timezone[:64], (
            f"defrag timezone must be an IANA time zone such as UTC or Europe/Paris, got {schedule.timezone[:64]!r}")
    if not 1 <= schedule.max_duration_s <= MAX_DEFRAG_DURATION_S:
        return "config.defrag.max_duration_s", str(schedule.max_duration_s), (
            f"defrag max duration must be from 1 to {MAX_DEFRAG_DURATION_S} seconds")
    if not 1 <= schedule.max_moves <= MAX_DEFRAG_MOVES:
        return "config.defrag.max_moves", str(schedule.max_moves), (
            f"defrag max moves must be from 1 to {MAX_DEFRAG_MOVES}")
    if not 0 <= schedule.max_share_of_namespace_pct <= 100:
        return "config.defrag.max_share_of_namespace_pct", str(schedule.max_share_of_namespace_pct), (
            "defrag max share of a namespace must be a percentage from 0 to 100")
    return None


def latest_tick(schedule: DefragSchedule, now: datetime) -> datetime | None:
    """The latest tick of ``schedule`` at or before ``now`` (second resolution) within the last
    ``max_duration_s``, in UTC; None when there is none or the schedule cannot run."""
    if check_schedule(schedule) is not None:
        return None
    zone = ZoneInfo(schedule.timezone)
    start = now.astimezone(zone).replace(microsecond=0) + timedelta(seconds=1)
    try:
        tick = next(iter(CronSim(schedule.schedule.strip(), start, reverse=True)))
    except (CronSimError, StopIteration):
        return None
    tick = tick.astimezone(now.tzinfo)
    return tick if now - tick < timedelta(seconds=schedule.max_duration_s) else None


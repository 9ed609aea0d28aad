"""Cron scaling rules: time windows that set resources and act as scale-down floors.

TensorFusion internal/autoscaler/recommender/cron_recommender.go: a rule is active
when its next end fire comes no later than its next start fire (a half-open window
``[start, end)`` at second resolution, robfig/cron v3 semantics; overnight windows work). Five
fields only; ``TZ=``/``CRON_TZ=`` prefixes select a zone, descriptors such as ``@daily`` are
errors. Expressions are evaluated with the ``cronsim`` library. Pure: ``now`` is passed in.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from events.bounds import MAX_MILLI_TFLOPS, MAX_VRAM_BYTES
from events.quantity import QuantityError, to_milli, to_value
from events.values import Resources
from services.autoscaler.config import CronScalingRule, ResourcesSpec
from services.autoscaler.recommendation import Outcome, RequestLimit, scales_up
from services.autoscaler.recommender import Processor


class CronError(ValueError):
    """A rule cannot be evaluated (bad expression, start == end, two active rules); names the rule."""


def _split_zone(expr: str, default_tz: tzinfo) -> tuple[str, tzinfo]:
    text = expr.strip()
    for prefix in ("CRON_TZ=", "TZ="):
        if text.startswith(prefix):
            zone, _, body = text[len(prefix):].partition(" ")
            try:
                return body.strip(), ZoneInfo(zone)
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise CronError(f"unknown time zone {zone!r} in {expr!r}") from exc
    return text, default_tz


def next_fire(expr: str, after: datetime, *, default_tz: tzinfo = UTC) -> datetime:
    """robfig ``Schedule.Next``: the first fire strictly after ``after``'s whole second.

    Raises CronError for descriptors, a field count other than 5, or an invalid field.
    """
    body, zone = _split_zone(expr, default_tz)
    if body.startswith("@") or len(body.split()) != 5:
        raise CronError(f"invalid cron expression {expr!r}: want 5 fields (minute hour dom month dow)")
    start = after.astimezone(zone).replace(microsecond=0)
    try:
        return next(iter(CronSim(body, start)))
    except (CronSimError, StopIteration) as exc:
        raise CronError(f"invalid cron expression {expr!r}: {exc}") from exc


def is_active(rule: CronScalingRule, now: datetime, *, default_tz: tzinfo = UTC) -> bool:
    """Whether ``rule``'s window holds ``now`` (TensorFusion cron_recommender.go); CronError on a bad rule."""
    if rule.start.strip() == rule.end.strip():
        raise CronError(f"cron scaling rule {rule.name!r}: start and end are the same ({rule.start!r})")
    next_start = next_fire(rule.start, now, default_tz=default_tz)
    next_end = next_fire(rule.end, now, default_tz=default_tz)
    return next_end <= next_start


def to_request_limit(spec: ResourcesSpec, *, rule: str = "") -> RequestLimit:
    """A TensorFusion ``Resources`` as per-GPU milli-TFLOPS and bytes (``compute`` % is ignored).

    CronError for a malformed quantity or one above the contract's per-GPU bounds
    (:mod:`events.bounds`: 10^7 TFLOPS, 4 TiB), so a recommendation the allocator would refuse is
    refused here, naming the field.
    """
    def one(tflops: str, vram: str, where: str) -> Resources:
        try:
            res = Resources(milli_tflops=to_milli(tflops) if tflops else 0, vram_bytes=to_value(vram) if vram else 0)
        except QuantityError as exc:
            raise CronError(f"cron scaling rule {rule!r}: desiredResources.{where}: {exc}") from exc
        for name, value, most in (("tflops", res.milli_tflops, MAX_MILLI_TFLOPS),
                                  ("vram", res.vram_bytes, MAX_VRAM_BYTES)):
            if value > most:
                raise CronError(f"cron scaling rule {rule!r}: desiredResources.{where}.{name}: "
                                f"{tflops if name == 'tflops' else vram!r} above the per-GPU bound")
        return res

    return RequestLimit(request=one(spec.requests.tflops, spec.requests.vram, "requests"),
                        limit=one(spec.limits.tflops, spec.limits.vram, "limits"))


def active_rule(rules: tuple[CronScalingRule, ...], now: datetime, *,
                default_tz: tzinfo = UTC) -> CronScalingRule | None:
    """The one enabled rule active at ``now``; CronError when two are (TensorFusion cron_recommender.go)."""
    found: CronScalingRule | None = None
    for rule in rules:
        if not rule.enable or not rule.name or not rule.start or not rule.end:
            continue
        if is_active(rule, now, default_tz=default_tz):
            if found is not None:
                raise CronError(f"cron scaling rules {found.name!r} and {rule.name!r} are active at the same time")
            found = rule
    return found


def recommend(rules: tuple[CronScalingRule, ...], *, previous: CronScalingRule | None, original: RequestLimit,
              current: RequestLimit, processor: Processor | None, now: datetime,
              default_tz: tzinfo = UTC) -> tuple[Outcome | None, CronScalingRule | None]:
    """The cron recommender (TensorFusion cron_recommender.go): ``(outcome, new active rule)``; CronError aborts.

    ``previous`` is the rule active after the last round (TensorFusion activeCronScalingRule).
    """
    rule = active_rule(rules, now, default_tz=default_tz)
    if rule is None:
        if previous is None:
            return None, None
        return Outcome(resources=original, has_applied=False, scale_down_locking=True, reason="RuleInactive",
                       message=f'Cron scaling rule "{previous.name}" is inactive'), None
    desired = to_request_limit(rule.desired_resources, rule=rule.name)
    if previous is not None and previous.desired_resources == rule.desired_resources:
        return Outcome(resources=desired, has_applied=True, scale_down_locking=True, reason="RuleActive",
                       message=f'Cron scaling rule "{rule.name}" is active'), rule
    message = f'Cron scaling rule "{rule.name}" is active'
    if processor is not None and scales_up(desired, current):
        desired, note = processor(desired)
        message = f"{message}; {note}" if note else message
    return Outcome(resources=desired, has_applied=False, scale_down_locking=True, reason="RuleActive",
                   message=message), rule

"""Autoscaler cases A14-A17: cron windows (robfig/cron v3 semantics) and the cron recommender."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from services.autoscaler import cron
from services.autoscaler.config import CronScalingRule, ResourceAmount, ResourcesSpec
from tests.unit.autoscaler.builders import rl


def at(h: int, m: int = 0, s: int = 0, us: int = 0) -> datetime:
    """Thursday 2026-03-05, UTC."""
    return datetime(2026, 3, 5, h, m, s, us, tzinfo=UTC)


def desired(req: tuple[str, str], lim: tuple[str, str]) -> ResourcesSpec:
    return ResourcesSpec(requests=ResourceAmount(tflops=req[0], vram=req[1]),
                         limits=ResourceAmount(tflops=lim[0], vram=lim[1]))


def rule(start: str = "0 0 * * *", end: str = "59 23 * * *", *, name: str = "test", enable: bool = True,
         want: ResourcesSpec | None = None) -> CronScalingRule:
    return CronScalingRule(enable=enable, name=name, start=start, end=end,
                           desired_resources=want or desired(("10", "8Gi"), ("20", "16Gi")))


WINDOWS = [
    ("0 9 * * *", "0 17 * * *", at(12), True),
    ("0 9 * * *", "0 17 * * *", at(18), False),
    ("0 9 * * *", "0 17 * * *", at(9), True),
    ("0 9 * * *", "0 17 * * *", at(8, 59, 59, 500_000), False),
    ("0 9 * * *", "0 17 * * *", at(17), False),
    ("0 9 * * *", "0 17 * * *", at(16, 59, 59, 999_000), True),
    ("0 22 * * *", "0 6 * * *", at(23), True),
    ("0 22 * * *", "0 6 * * *", at(3), True),
    ("0 22 * * *", "0 6 * * *", at(12), False),
    ("0 0 * * *", "59 23 * * *", at(23, 59, 30), False),
    ("0 0 * * Thu", "59 23 * * Thu", at(12), True),
    ("0 0 * * Fri", "59 23 * * Fri", at(12), False),
    ("0 0 * * *", "0 0 * * 0-6", at(7, 13), True),
    ("TZ=Asia/Shanghai 0 9 * * *", "TZ=Asia/Shanghai 0 17 * * *", at(2), True),
]


@pytest.mark.parametrize(("start", "end", "now", "active"), WINDOWS)
def test_a17_window(start: str, end: str, now: datetime, active: bool) -> None:
    assert cron.is_active(rule(start, end), now) is active


@pytest.mark.parametrize(("start", "end"), [("-30 0 * * *", "59 23 * * *"), ("0 0 * * *", "59 -23 * * *"),
                                            ("0 0 * -3 *", "59 23 * * *"), ("30 0 * * *", "30 0 * * *"),
                                            ("@daily", "59 23 * * *"), ("0 0 0 * * *", "59 23 * * *")])
def test_a16_bad_rules_are_errors(start: str, end: str) -> None:
    with pytest.raises(cron.CronError):
        cron.recommend((rule(start, end),), previous=None, original=rl((1, 1), (1, 1)),
                       current=rl((1, 1), (1, 1)), processor=None, now=at(12))


def test_a16_two_active_rules_are_an_error() -> None:
    with pytest.raises(cron.CronError, match="same time"):
        cron.active_rule((rule(name="a"), rule(name="b")), at(12))


@pytest.mark.parametrize("rules", [(), (CronScalingRule(enable=False),), (rule(enable=False),)])
def test_a16_no_rules_give_none(rules: tuple[CronScalingRule, ...]) -> None:
    assert cron.recommend(rules, previous=None, original=rl((1, 1), (1, 1)), current=rl((1, 1), (1, 1)),
                          processor=None, now=at(12)) == (None, None)


def test_a14_a15_active_then_same_then_renamed_then_reverted() -> None:
    spec_rl = rl((5, 4), (10, 8))
    first, active = cron.recommend((rule(),), previous=None, original=spec_rl, current=spec_rl, processor=None,
                                   now=at(12))
    assert first is not None and active == rule()
    assert first.resources == rl((10, 8), (20, 16)) and not first.has_applied and first.scale_down_locking
    assert first.message == 'Cron scaling rule "test" is active'
    second, active = cron.recommend((rule(),), previous=active, original=spec_rl, current=first.resources,
                                    processor=None, now=at(12))
    assert second is not None and second.has_applied and second.scale_down_locking
    renamed = rule(name="updatedName", want=desired(("5", "4Gi"), ("10", "8Gi")))
    third, active = cron.recommend((renamed,), previous=active, original=spec_rl, current=second.resources,
                                   processor=None, now=at(12))
    assert third is not None and not third.has_applied and active == renamed
    off = msgspec.structs.replace(renamed, enable=False)
    revert, active = cron.recommend((off,), previous=active, original=spec_rl, current=third.resources,
                                    processor=None, now=at(12))
    assert revert is not None and revert.resources == spec_rl and not revert.has_applied
    assert revert.scale_down_locking and active is None
    assert revert.message == 'Cron scaling rule "updatedName" is inactive'
    after = cron.recommend((off,), previous=None, original=spec_rl, current=spec_rl, processor=None, now=at(12))
    assert after == (None, None)


def test_bad_desired_quantity_names_the_rule_and_field() -> None:
    bad = rule(want=desired(("ten", "8Gi"), ("20", "16Gi")))
    with pytest.raises(cron.CronError, match=r"'test'.*desiredResources.requests"):
        cron.recommend((bad,), previous=None, original=rl((1, 1), (1, 1)), current=rl((1, 1), (1, 1)),
                       processor=None, now=at(12))

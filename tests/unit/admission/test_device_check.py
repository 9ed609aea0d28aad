"""benchmarks/device_check.py's verdicts, pinned by what it saw on a lent H200 (BENCHMARKS.md,
"Device check", 2026-11-28): a HAMi-core library that loads but exports no hooks must fail the
check, the enforced limit must pass it, and a process that may see no device is an empty report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import device_check
from benchmarks.device_check import Report, Seen, verify

UUID = "GPU-6054d963-aeea-1ca5-d884-212d9ff96d02"
LIMIT = 10 * 2**30
H200_TOTAL = 150_109_880_320
"""cuDeviceTotalMem of the H200 (driver 580.159.04) without HAMi-core."""


def seen(**fields: Any) -> Seen:
    """A device of case (c): ``CUDA_DEVICE_MEMORY_LIMIT_0=10240m`` with libvgpu.so preloaded."""
    return Seen(**{"index": 0, "uuid": UUID, "limit_bytes": LIMIT, **fields})


def test_a_library_that_loads_but_enforces_nothing_fails_the_check() -> None:
    # run 1: a Release build of HAMi-core (no exported cu* hooks) printed "Initializing" and limited nothing
    report = Report(backend="cuda", devices=[seen(total_bytes=H200_TOTAL, allocated_bytes=LIMIT,
                                                  refused_beyond_limit=False)])
    problems = verify(report, devices=[UUID], limit=LIMIT)
    assert problems == [f"device 0: reports {H200_TOTAL} bytes of memory, expected the limit {LIMIT}",
                        f"device 0: allocated {LIMIT} beyond the limit {LIMIT}"]


def test_the_enforced_limit_passes_with_the_cuda_context_counted_against_it() -> None:
    # run 2: total = the limit; 37 chunks of 256 MiB fit, the 38th did not (the context counts, ~0.5 GiB)
    report = Report(backend="cuda", devices=[seen(total_bytes=LIMIT, allocated_bytes=37 * device_check.CHUNK,
                                                  refused_beyond_limit=True)])
    assert verify(report, devices=[UUID.lower()], limit=LIMIT) == []
    assert verify(report, devices=[UUID], limit=LIMIT // 2) == [
        f"device 0: limit {LIMIT}, expected {LIMIT // 2}",
        f"device 0: allocated {37 * device_check.CHUNK} beyond the limit {LIMIT // 2}"]
    assert verify(report, devices=[], limit=None) == [f"sees {[UUID]}, expected []"]


class NoDeviceDriver:
    """libcuda.so.1 as a process with ``CUDA_VISIBLE_DEVICES=""`` finds it: cuInit answers ``code``."""

    def __init__(self, code: int) -> None:
        self.code = code

    def cuInit(self, flags: int) -> int:
        return self.code

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{name} called after cuInit failed")


@pytest.mark.parametrize(("code", "error"), [(100, ""), (999, "cuInit failed with CUresult 999")])
def test_no_visible_device_is_an_empty_report_and_other_init_failures_are_errors(
        monkeypatch: pytest.MonkeyPatch, code: int, error: str) -> None:
    monkeypatch.setattr(device_check.ctypes, "CDLL", lambda name: NoDeviceDriver(code))
    report = device_check.run_cuda({})
    assert report.devices == [] and report.error == error
    assert (verify(report, devices=[], limit=None) == []) is (not error)


def test_hami_core_counts_as_loaded_through_the_preload_file_too(tmp_path: Path) -> None:
    # case g (2026-11-28, H200): with LD_PRELOAD cleared, /etc/ld.so.preload naming libvgpu.so still
    # loaded HAMi-core (10 GiB seen of 140); the check must then expect the plan's limit
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "10240m", "CUDA_DEVICE_SM_LIMIT": "25"}
    preload = tmp_path / "ld.so.preload"
    assert device_check.hami_limits(env, 1, preload) == [0] and device_check.sm_limit(env, preload) == 0  # absent
    preload.write_text("/usr/local/vgpu/libvgpu.so\n")
    assert device_check.hami_limits(env, 1, preload) == [LIMIT] and device_check.sm_limit(env, preload) == 25
    assert device_check.hami_loaded({"LD_PRELOAD": "/usr/local/vgpu/libvgpu.so"}, tmp_path / "absent")

"""What a container set up by gpuledger sees: its GPUs, and how much VRAM it can allocate.

Run inside the container (or in a process given the container's environment). Reads the
environment exactly as the container gets it (``NVIDIA_VISIBLE_DEVICES``, HAMi-core's
``CUDA_DEVICE_MEMORY_LIMIT[_<i>]``, ``CUDA_DEVICE_SM_LIMIT`` and ``LD_PRELOAD``), lists the CUDA
devices it can see with their UUID and total memory, then on each device allocates VRAM in chunks
up to the limit and one chunk beyond it, and prints one JSON document::

    {"backend": "cuda" | "fake", "devices": [{"index", "uuid", "total_bytes", "limit_bytes",
     "sm_limit", "allocated_bytes", "refused_beyond_limit"}], "error": ""}

Backends:

* ``cuda`` (default): the CUDA driver API through ``libcuda.so.1`` (ctypes; no toolkit or Python
  package needed). In a container of the NVIDIA runtime the toolkit has already narrowed the devices
  to ``NVIDIA_VISIBLE_DEVICES``; on a bare host (no toolkit) ``--emulate-toolkit`` copies
  ``NVIDIA_VISIBLE_DEVICES`` into ``CUDA_VISIBLE_DEVICES`` (CUDA accepts UUIDs there) before CUDA
  starts. Under HAMi-core (``LD_PRELOAD=.../libvgpu.so``, or ``/etc/ld.so.preload`` naming it) the
  driver reports the limit as total memory and refuses allocations beyond it.
* ``fake`` (``--fake CAPTURE``): no GPU. A node of ``--node-gpus`` devices built from an NVML
  capture (tests/fixtures/nvml_h100_80gb_hbm3.json: name, UUID, memory; the other devices get
  derived UUIDs), the NVIDIA container toolkit's selection rule (``void``/empty/unset: none;
  ``all``; a comma list of UUIDs, MIG names or indices; an unknown name fails like the toolkit) and
  HAMi-core's memory check (per-device ``CUDA_DEVICE_MEMORY_LIMIT_<i>``, else
  ``CUDA_DEVICE_MEMORY_LIMIT``; suffixes k/m/g; 0 or unset: no limit), active when ``LD_PRELOAD``
  names ``libvgpu.so``. It proves the environment gpuledger computes, not the hardware.

``--expect-devices UUID,...`` and ``--expect-limit BYTES`` (or ``--expect-from-env``: what gpuledger
set in the environment) turn the output into a check (exit 1 with the difference on stderr).
Usage on a GPU node: docs/runtime.md ("Check one node").
Stdlib only, so it runs in any image with Python 3.10+.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CHUNK = 256 * 2**20
"""Allocation step (bytes)."""
CUDA_ERROR_NO_DEVICE = 100
"""cuInit's answer when the process may see no device: an empty report, not an error."""


@dataclass
class Seen:
    """One device as the process sees it."""

    index: int
    uuid: str
    total_bytes: int
    limit_bytes: int = 0
    sm_limit: int = 0
    allocated_bytes: int = 0
    refused_beyond_limit: bool | None = None


@dataclass
class Report:
    """The script's output."""

    backend: str
    devices: list[Seen] = field(default_factory=list)
    error: str = ""


def parse_limit(text: str) -> int:
    """HAMi-core's size syntax: ``1024m``, ``16g``, ``512k``, or bytes; "" or 0: no limit (0)."""
    text = text.strip().lower()
    if not text:
        return 0
    scale = {"k": 2**10, "m": 2**20, "g": 2**30}.get(text[-1], 1)
    number = text[:-1] if scale > 1 else text
    if not number.isdigit():
        raise ValueError(f"bad HAMi-core size {text!r}")
    return int(number) * scale


PRELOAD_FILE = Path("/etc/ld.so.preload")
"""The dynamic loader's preload list: gpuledger mounts the node's ``ld.so.preload`` naming
``libvgpu.so`` on it (docs/runtime.md), so HAMi-core loads also in a process that clears
``LD_PRELOAD``."""


def hami_loaded(env: dict[str, str], preload_file: Path = PRELOAD_FILE) -> bool:
    """Whether HAMi-core's ``libvgpu.so`` is loaded into a process of ``env``: named by
    ``LD_PRELOAD`` or by ``preload_file`` (unreadable or absent: not)."""
    if "libvgpu.so" in env.get("LD_PRELOAD", ""):
        return True
    try:
        return "libvgpu.so" in preload_file.read_text(errors="replace")
    except OSError:
        return False


def hami_limits(env: dict[str, str], count: int, preload_file: Path = PRELOAD_FILE) -> list[int]:
    """Per visible device, the VRAM limit HAMi-core applies (0: none); none without libvgpu.so."""
    if not hami_loaded(env, preload_file):
        return [0] * count
    default = parse_limit(env.get("CUDA_DEVICE_MEMORY_LIMIT", ""))
    return [parse_limit(env.get(f"CUDA_DEVICE_MEMORY_LIMIT_{i}", "")) or default for i in range(count)]


def sm_limit(env: dict[str, str], preload_file: Path = PRELOAD_FILE) -> int:
    """HAMi-core's SM percent (0: none)."""
    if not hami_loaded(env, preload_file):
        return 0
    text = env.get("CUDA_DEVICE_SM_LIMIT", "").strip()
    return int(text) if text.isdigit() else 0


# ---- fake backend ------------------------------------------------------------------------------

@dataclass
class FakeGpu:
    """One device of the fake node: NVML index, UUID, memory."""

    index: int
    uuid: str
    memory_bytes: int
    mig_memory_bytes: dict[int, int]
    """Slice count of a MIG GPU instance -> its memory (bytes), from the capture's profiles."""


def fake_node(capture: dict[str, Any], count: int) -> list[FakeGpu]:
    """``count`` devices like the captured one; device 0 keeps the captured UUID."""
    device = capture["device"]
    base = str(device["uuid"])
    mig: dict[int, int] = {}
    for profile in capture.get("mig_gpu_instance_profiles", []):
        size = max((s for _, s in profile["placements_start_size"]), default=0)
        mig[size] = max(mig.get(size, 0), int(profile["memory_mib"]) * 2**20)
    memory = int(device["memory_total_bytes"])
    return [FakeGpu(index=i, uuid=base if i == 0 else f"{base[:-2]}{i:02x}", memory_bytes=memory, mig_memory_bytes=mig)
            for i in range(count)]


_GI_SIZE = {0: 8, 1: 4, 2: 4, 3: 2, 4: 2, 5: 2, 6: 2, **{gi: 1 for gi in range(7, 15)}}


def toolkit_select(value: str | None, node: list[FakeGpu]) -> list[tuple[str, int]]:
    """The NVIDIA container toolkit's device selection: ``(name, memory bytes)`` per device the
    container gets, in the order given; raises ValueError for a name the node does not have."""
    if value is None or value.strip() in ("", "void", "none"):
        return []
    if value.strip() == "all":
        return [(g.uuid, g.memory_bytes) for g in node]
    by_uuid = {g.uuid.lower(): g for g in node}
    out: list[tuple[str, int]] = []
    for name in (n.strip() for n in value.split(",")):
        if name.isdigit() and int(name) < len(node):
            gpu = node[int(name)]
            out.append((gpu.uuid, gpu.memory_bytes))
        elif name.lower() in by_uuid:
            out.append((by_uuid[name.lower()].uuid, by_uuid[name.lower()].memory_bytes))
        elif name.startswith("MIG-") and name.count("/") == 2:
            parent, gi, _ci = name[4:].split("/")
            gpu = by_uuid.get(parent.lower())
            size = _GI_SIZE.get(int(gi)) if gi.isdigit() else None
            if gpu is None or size is None or size not in gpu.mig_memory_bytes:
                raise ValueError(f"unknown device {name!r}")
            out.append((name, gpu.mig_memory_bytes[size]))
        else:
            raise ValueError(f"unknown device {name!r}")
    return out


class FakeCuda:
    """The fake driver: the toolkit's devices, HAMi-core's check on every allocation (when
    preloaded), and the physical memory behind it."""

    def __init__(self, visible: list[tuple[str, int]], limits: list[int]) -> None:
        self.visible = visible
        self.limits = limits
        self.used = [0] * len(visible)

    def total(self, index: int) -> int:
        """What cuDeviceTotalMem reports: HAMi-core reports its limit."""
        memory, limit = self.visible[index][1], self.limits[index]
        return min(memory, limit) if limit else memory

    def alloc(self, index: int, size: int) -> bool:
        """cuMemAlloc: False (CUDA_ERROR_OUT_OF_MEMORY) beyond the limit or the memory."""
        if self.used[index] + size > self.total(index):
            return False
        self.used[index] += size
        return True


def run_fake(env: dict[str, str], capture_path: Path, node_gpus: int) -> Report:
    """The fake backend (see the module doc): the same program as :func:`run_cuda` on FakeCuda."""
    report = Report(backend="fake")
    node = fake_node(json.loads(capture_path.read_text()), node_gpus)
    try:
        visible = toolkit_select(env.get("NVIDIA_VISIBLE_DEVICES"), node)
    except ValueError as exc:
        report.error = f"nvidia-container-cli: {exc}"
        return report
    limits = hami_limits(env, len(visible))
    driver = FakeCuda(visible, limits)
    for index, (uuid, _memory) in enumerate(visible):
        seen = Seen(index=index, uuid=uuid, total_bytes=driver.total(index), limit_bytes=limits[index],
                    sm_limit=sm_limit(env))
        ceiling = seen.limit_bytes or seen.total_bytes
        while seen.allocated_bytes < ceiling and driver.alloc(index, min(CHUNK, ceiling - seen.allocated_bytes)):
            seen.allocated_bytes = driver.used[index]
        if seen.limit_bytes:
            seen.refused_beyond_limit = not driver.alloc(index, CHUNK)
        report.devices.append(seen)
    return report


# ---- CUDA backend ------------------------------------------------------------------------------

def _uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def run_cuda(env: dict[str, str]) -> Report:  # pragma: no cover - needs a GPU (docs/runtime.md)
    """The CUDA backend: the driver API through libcuda (see the module doc)."""
    report = Report(backend="cuda")
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        report.error = f"libcuda.so.1 not loadable: {exc}"
        return report

    def check(code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what} failed with CUresult {code}")

    try:
        code = cuda.cuInit(0)
        if code == CUDA_ERROR_NO_DEVICE:  # what CUDA_VISIBLE_DEVICES="" (no device) gives
            return report
        check(code, "cuInit")
        count = ctypes.c_int()
        check(cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
        limits = hami_limits(env, count.value)
        for index in range(count.value):
            device = ctypes.c_int()
            check(cuda.cuDeviceGet(ctypes.byref(device), index), "cuDeviceGet")
            raw = (ctypes.c_char * 16)()
            check(cuda.cuDeviceGetUuid(raw, device), "cuDeviceGetUuid")
            total = ctypes.c_size_t()
            check(cuda.cuDeviceTotalMem_v2(ctypes.byref(total), device), "cuDeviceTotalMem")
            seen = Seen(index=index, uuid=_uuid_text(bytes(raw)), total_bytes=total.value,
                        limit_bytes=limits[index], sm_limit=sm_limit(env))
            context = ctypes.c_void_p()
            check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
            check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
            ceiling = seen.limit_bytes or seen.total_bytes
            pointers: list[ctypes.c_uint64] = []
            while seen.allocated_bytes + CHUNK <= ceiling:
                pointer = ctypes.c_uint64()
                if cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(CHUNK)) != 0:
                    break
                pointers.append(pointer)
                seen.allocated_bytes += CHUNK
            if seen.limit_bytes:
                pointer = ctypes.c_uint64()
                beyond = ceiling - seen.allocated_bytes + CHUNK  # ends one chunk past the limit
                code = cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(beyond))
                seen.refused_beyond_limit = code != 0
                if code == 0:
                    pointers.append(pointer)
            for pointer in pointers:
                cuda.cuMemFree_v2(pointer)
            cuda.cuDevicePrimaryCtxRelease(device)
            report.devices.append(seen)
    except RuntimeError as exc:
        report.error = str(exc)
    return report


def verify(report: Report, *, devices: list[str] | None, limit: int | None) -> list[str]:
    """What differs from the expectation (empty: as expected)."""
    problems = [report.error] if report.error else []
    seen = [d.uuid for d in report.devices]
    if devices is not None and sorted(u.lower() for u in seen) != sorted(u.lower() for u in devices):
        problems.append(f"sees {seen}, expected {devices}")
    for device in report.devices if limit is not None else ():
        if device.limit_bytes != limit:
            problems.append(f"device {device.index}: limit {device.limit_bytes}, expected {limit}")
        elif limit and device.total_bytes != limit:
            problems.append(f"device {device.index}: reports {device.total_bytes} bytes of memory, expected "
                            f"the limit {limit}")
        if device.allocated_bytes > (limit or device.total_bytes) or device.refused_beyond_limit is False:
            problems.append(f"device {device.index}: allocated {device.allocated_bytes} beyond the limit {limit}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module doc); exit 0 as expected, 1 otherwise, 2 on bad arguments."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fake", type=Path, help="NVML capture JSON: use the fake backend")
    parser.add_argument("--node-gpus", type=int, default=4, help="devices of the fake node (default 4)")
    parser.add_argument("--emulate-toolkit", action="store_true",
                        help="no container toolkit here: narrow CUDA to NVIDIA_VISIBLE_DEVICES itself")
    parser.add_argument("--expect-devices", help="comma-separated UUIDs the process must see (\"\" for none)")
    parser.add_argument("--expect-limit", type=int, help="VRAM limit in bytes every device must enforce")
    parser.add_argument("--expect-from-env", action="store_true",
                        help="expect the devices of NVIDIA_VISIBLE_DEVICES (GPU UUIDs) and the limit of "
                        "CUDA_DEVICE_MEMORY_LIMIT_0, as gpuledger set them (the in-pod check)")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    if args.expect_from_env:
        value = env.get("NVIDIA_VISIBLE_DEVICES", "")
        args.expect_devices = "" if value in ("", "void", "none") else value
        args.expect_limit = hami_limits(env, 1)[0] or None
    if args.fake is not None:
        report = run_fake(env, args.fake, args.node_gpus)
    else:
        if args.emulate_toolkit:
            value = env.get("NVIDIA_VISIBLE_DEVICES", "")
            os.environ["CUDA_VISIBLE_DEVICES"] = "" if value in ("", "void", "none") else value
        report = run_cuda(env)
    print(json.dumps(asdict(report), indent=1))
    expected = None if args.expect_devices is None else [d for d in args.expect_devices.split(",") if d]
    problems = verify(report, devices=expected, limit=args.expect_limit)
    for problem in problems:
        print(f"device_check: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""Print the environment gpuledger's device_plan gives one container of a 1-GPU hami-core grant of
10 GiB VRAM / 25 % compute, as `export` lines; the GPU's UUID is a placeholder for run.sh to fill."""
import shlex
import sys

from events.values import AllocationSpec, GpuSpec, Resources
from services.podspec.device_plan import device_plan

PLACEHOLDER = "gpu-00000000-0000-0000-0000-0000000000aa"  # discovery stores UUIDs lower-cased
share = Resources(vram_bytes=10 * 2**30, compute_milli_percent=25_000)
spec = AllocationSpec(allocation_id="devcheck", namespace="default", pod="devcheck", pool="h200",
                      request=share, limit=share, isolation="hard")
gpu = GpuSpec(name="g0", capacity=Resources(milli_tflops=989_000, vram_bytes=143_771 * 2**20), model="H200",
              index=0, uuid=PLACEHOLDER)
plan = device_plan(spec, enforcement="hami-core", gpus=("g0",), records={"g0": gpu})
assert not plan.problems, plan.problems
(group,) = plan.containers
for name, value in sorted(group.env.items()):
    sys.stdout.write(f"export {name}={shlex.quote(value)}\n")

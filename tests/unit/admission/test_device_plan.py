"""From grant to container: the environment each container starts with sees exactly its GPUs, with
limits equal to the grant (services/podspec/device_plan.py, services/admission/device_patch.py).

Every test goes the pod's whole way: the admission skeleton (placeholders), the binder's pin
(through the AllocationBook, from events), then the kubelet's reading of the environment
(tests/fixtures/kubelet.py); a CUDA image's own ``NVIDIA_VISIBLE_DEVICES=all`` and a user's attempt
to set the variables are part of every pod.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events import decisions
from events.values import AllocationSpec, GpuSpec, Partition, PoolConfig, Resources
from services.admission.binding import pin_ops, ungate_ops
from services.admission.book import AllocationBook
from services.admission.device_patch import skeleton_ops
from services.admission.patch import map_ops
from services.podspec import keys
from services.podspec.device_plan import (
    ENFORCEMENT_KEY,
    MIB,
    device_plan,
    gpu_instance_id,
    mig_device,
    nvml_uuid,
    plan_view,
)
from tests.fixtures.kubelet import container_environment

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[3]
CAPTURE = ROOT / "tests/fixtures/nvml_h100_80gb_hbm3.json"
H100 = json.loads(CAPTURE.read_text())["device"]
H100_UUID = H100["uuid"]
CAPACITY = Resources(milli_tflops=989_000, vram_bytes=H100["memory_total_bytes"])
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
IMAGE_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "CUDA_VERSION": "12.4"}
"""What an nvidia/cuda image sets itself."""


def node_gpus(count: int = 8) -> tuple[GpuSpec, ...]:
    """GPUs as NVML discovery registers them: lower-cased UUIDs; g0 is the captured H100 (the fake
    node of benchmarks/device_check.py derives the others the same way)."""
    return tuple(GpuSpec(name=f"g{i}", capacity=CAPACITY, model="H100", index=i,
                         uuid=(H100_UUID if i == 0 else f"{H100_UUID[:-2]}{i:02x}").lower()) for i in range(count))


def pod(containers: list[str]) -> dict[str, Any]:
    """A pod whose containers try to choose their own GPUs and escape HAMi-core."""
    escape = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "LD_PRELOAD", "value": ""},
              {"name": "CUDA_DEVICE_SM_LIMIT", "value": "100"}, {"name": "CUDA_DISABLE_CONTROL", "value": "true"},
              {"name": "CUDA_DEVICE_SM_LIMIT_0", "value": "100"},  # HAMi-core takes it over CUDA_DEVICE_SM_LIMIT
              {"name": "CUDA_REDIRECT", "value": "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},  # the unhooked driver
              {"name": "KEEP", "value": "me"}]
    return {"metadata": {"name": "p", "namespace": "default", "annotations": {keys.QOS: "medium"}},
            "spec": {"containers": [{"name": c, "image": "nvidia/cuda", "env": copy.deepcopy(escape)}
                                    for c in containers],
                     "initContainers": [{"name": "init", "image": "nvidia/cuda"}],
                     "schedulingGates": [{"name": keys.SCHEDULING_GATE}]}}


def admit(raw: dict[str, Any], spec: AllocationSpec, mode: str) -> dict[str, Any]:
    """What the webhook makes of the pod (the skeleton and the placeholder annotations)."""
    plan = device_plan(spec, enforcement=mode)  # type: ignore[arg-type]
    ops = map_ops("/metadata/annotations", existing=raw["metadata"]["annotations"], changes=plan.annotations)
    return jsonpatch.apply_patch(copy.deepcopy(raw), ops + skeleton_ops(raw, plan))


def bind(admitted: dict[str, Any], spec: AllocationSpec, gpus: tuple[str, ...], mode: str,
         partitions: tuple[Partition, ...] = ()) -> tuple[dict[str, Any], Any]:
    """What the binder makes of it: the book folds the node, the pool and the grant; pin, ungate."""
    book = AllocationBook()
    book.apply(decisions.NodeRegistered(at=NOW, node="n", pool="pool", gpus=node_gpus()))
    book.apply(decisions.PoolConfigured(at=NOW, pool="pool", config=PoolConfig(enforcement=mode)))  # type: ignore[arg-type]
    grant = book.apply(decisions.AllocationGranted(at=NOW, spec=spec, node="n", gpus=gpus, charges=(),
                                                   partitions=partitions))
    assert grant is not None
    pinned = jsonpatch.apply_patch(copy.deepcopy(admitted), pin_ops(admitted, grant=grant))
    return jsonpatch.apply_patch(pinned, ungate_ops(pinned)), grant


def changed_paths(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    """Top paths (``/spec/affinity`` ...) a JSON diff of the two pods touches."""
    return {"/".join(op["path"].split("/")[:3]) for op in jsonpatch.make_patch(before, after)}


@st.composite
def grants(draw: st.DrawFn) -> tuple[AllocationSpec, tuple[str, ...], tuple[Partition, ...], list[str], str]:
    """A grant shape: whole GPUs, TFLOPS or percent shares, multi-container, or partitions."""
    shape = draw(st.sampled_from(["whole", "tflops", "percent", "partitioned"]))
    containers = draw(st.lists(st.sampled_from(["main", "side", "tool"]), min_size=1, max_size=3, unique=True))
    split = len(containers) > 1 and draw(st.booleans())
    counts = {c: draw(st.integers(0, 2)) for c in containers} if split else {}
    count = sum(counts.values()) if split else draw(st.integers(1, 4))
    if count == 0:
        counts[containers[0]], count = 1, 1
    gpus = tuple(f"g{i}" for i in draw(st.permutations(range(8)))[:count])
    vram = draw(st.integers(1, 80)) * 2**30
    partitions: tuple[Partition, ...] = ()
    if shape == "whole":
        request = limit = Resources(milli_tflops=989_000, vram_bytes=CAPACITY.vram_bytes)
        isolation = "shared"
    elif shape == "tflops":
        request = Resources(milli_tflops=draw(st.integers(1, 989_000)), vram_bytes=vram)
        limit = Resources(milli_tflops=draw(st.integers(request.milli_tflops, 989_000)), vram_bytes=vram)
        isolation = draw(st.sampled_from(["soft", "hard"]))
    elif shape == "percent":
        request = Resources(compute_milli_percent=draw(st.integers(1, 100_000)), vram_bytes=vram)
        limit = Resources(compute_milli_percent=draw(st.integers(request.compute_milli_percent, 100_000)),
                          vram_bytes=vram)
        isolation = "hard"
    else:
        size = draw(st.sampled_from([1, 2, 4, 8]))
        start = draw(st.integers(0, 8 // size - 1)) * size
        partitions = (Partition(template=f"{size}slice", profile_id=9, start=start, end=start + size),) * count
        request = limit = Resources(milli_tflops=1000, vram_bytes=vram)
        isolation = "partitioned"
    attributes = {keys.CONTAINER_GPU_COUNT: json.dumps(counts)} if split else {}
    if draw(st.booleans()):  # TensorFusion's GPU containers (compose always sets it; older specs may not)
        attributes[keys.INJECT_CONTAINER] = ",".join(draw(st.lists(st.sampled_from(containers), min_size=1,
                                                                    unique=True)))
    mode = draw(st.sampled_from(["none", "hami-core", "tensor-fusion"]))
    spec = AllocationSpec(allocation_id="a", namespace="default", pod="p", pool="pool", request=request, limit=limit,
                          gpu_count=count, isolation=isolation, attributes={**attributes, ENFORCEMENT_KEY: mode},
                          partition_template=partitions[0].template if partitions else "")
    return spec, gpus, partitions, containers, mode


def expected_devices(spec: AllocationSpec, gpus: tuple[str, ...], partitions: tuple[Partition, ...],
                     containers: list[str]) -> dict[str, list[str]]:
    """Per container, the NVML names it must see, derived independently of device_plan."""
    by_name = {g.name: g for g in node_gpus()}

    def name(gpu: str, index: int) -> str:
        uuid = "GPU-" + by_name[gpu].uuid[4:]
        if not partitions:
            return uuid
        p = partitions[index]
        gi = {8: 0, 4: 1, 2: 3, 1: 7}[p.end - p.start] + p.start // (p.end - p.start)
        return f"MIG-{uuid}/{gi}/0"

    names = [name(g, i) for i, g in enumerate(gpus)]
    raw = spec.attributes.get(keys.CONTAINER_GPU_COUNT)
    if not raw:
        inject = [n for n in spec.attributes.get(keys.INJECT_CONTAINER, "").split(",") if n] or containers
        return {c: names if c in inject else [] for c in containers}
    counts, out, start = json.loads(raw), {}, 0
    for c in sorted(counts):
        out[c] = names[start:start + counts[c]]
        start += counts[c]
    return {c: out.get(c, []) for c in containers}


def visible(env: dict[str, str]) -> list[str]:
    value = env.get("NVIDIA_VISIBLE_DEVICES", "")
    return [] if value in ("", "void") else value.split(",")


@settings(max_examples=150, deadline=None)
@given(grants())
def test_every_container_sees_exactly_its_grant_with_limits_equal_to_it(shape: Any) -> None:
    spec, gpus, partitions, containers, mode = shape
    raw = pod(containers)
    admitted = admit(raw, spec, mode)
    final, grant = bind(admitted, spec, gpus, mode, partitions)
    assert grant.problems == ()
    for key in final["metadata"]["annotations"]:  # what the API server accepts as an annotation key
        prefix, _, name = key.rpartition("/")
        assert QUALIFIED_NAME.fullmatch(name) and len(name) <= 63, key
        assert not prefix or (DNS_SUBDOMAIN.fullmatch(prefix) and len(prefix) <= 253), key
    # the binder touches only what a gated pod allows (KEP-3838) and annotations
    assert changed_paths(admitted, final) <= {"/metadata/annotations", "/spec/affinity", "/spec/schedulingGates"}
    want = expected_devices(spec, gpus, partitions, containers)
    for container in containers:
        before = container_environment(admitted, container, image_env=IMAGE_ENV)
        env = container_environment(final, container, image_env=IMAGE_ENV)
        assert env["KEEP"] == "me"
        if mode == "tensor-fusion":  # TensorFusion's runtime decides: the pod's own environment is untouched
            assert env == container_environment(raw, container, image_env=IMAGE_ENV)
            assert "runtimeClassName" not in final["spec"]
            continue
        assert final["spec"]["runtimeClassName"] == "nvidia"
        assert visible(before) == []  # before the bind (a gate removed by hand): no GPU at all
        assert visible(env) == want[container]
        hami = mode == "hami-core" and not partitions and want[container]
        assert ("libvgpu.so" in env.get("LD_PRELOAD", "")) == bool(hami)
        if hami:
            vram = spec.limit.vram_bytes
            for index in range(len(want[container])):
                assert env[f"CUDA_DEVICE_MEMORY_LIMIT_{index}"] == f"{vram // MIB}m"
            assert f"CUDA_DEVICE_MEMORY_LIMIT_{len(want[container])}" not in env
            if spec.limit.compute_milli_percent:
                share = spec.limit.compute_milli_percent / 100_000
            else:
                share = spec.limit.milli_tflops / CAPACITY.milli_tflops
            assert int(env["CUDA_DEVICE_SM_LIMIT"]) - 1 < share * 100 <= int(env["CUDA_DEVICE_SM_LIMIT"])
            for index in range(len(want[container])):  # the pod's per-device 100 is overridden
                assert env[f"CUDA_DEVICE_SM_LIMIT_{index}"] == env["CUDA_DEVICE_SM_LIMIT"]
            assert env["CUDA_DISABLE_CONTROL"] == "false"  # the pod's "true" is overridden
            assert env["CUDA_REDIRECT"] == "/usr/local/vgpu/libvgpu.so"
        mounts = {m["mountPath"] for c in final["spec"]["containers"] if c["name"] == container
                  for m in c.get("volumeMounts", [])}
        if hami:
            assert {"/usr/local/vgpu", "/etc/ld.so.preload"} <= mounts
        else:  # nothing of HAMi-core (a variable the pod set itself is left, without the library it is inert)
            assert not {k for k in env if k.startswith("CUDA_DEVICE_MEMORY")}
            assert not mounts
    if mode != "tensor-fusion":
        assert visible(container_environment(final, "init", image_env=IMAGE_ENV, init=True)) == []
    volumes = {v["name"] for v in final["spec"].get("volumes", [])}
    enforced = mode == "hami-core" and not partitions and any(want.values())
    assert ("gpuledger-vgpu-lib" in volumes) == enforced  # no hostPath on a pod that does not need it
    seen = [d for c in containers for d in want[c]]
    if spec.attributes.get(keys.CONTAINER_GPU_COUNT):
        assert len(seen) == len(set(seen))  # a GPU mapped to one container is seen by no other


def test_discovery_uuid_is_written_as_nvml_spells_it() -> None:
    assert nvml_uuid(H100_UUID.lower()) == H100_UUID
    assert nvml_uuid("mig-1234") == "MIG-1234"
    assert nvml_uuid("") == ""


@pytest.mark.parametrize(("start", "size", "gi"), [
    (0, 8, 0), (0, 4, 1), (4, 4, 2), (0, 2, 3), (6, 2, 6), (0, 1, 7), (6, 1, 13), (3, 2, None), (0, 3, None)])
def test_gpu_instance_ids_follow_the_memory_slice_tree(start: int, size: int, gi: int | None) -> None:
    assert gpu_instance_id(Partition(template="t", profile_id=0, start=start, end=start + size)) == gi


def test_a_partition_names_its_mig_device_and_fails_closed_without_uuid() -> None:
    gpu = node_gpus()[0]
    three_g = Partition(template="3g.40gb", profile_id=9, start=4, end=8)
    assert mig_device(gpu, three_g) == f"MIG-{H100_UUID}/2/0"
    assert mig_device(GpuSpec(name="x", capacity=CAPACITY), three_g) is None
    spec = AllocationSpec(allocation_id="a", namespace="d", pod="p", pool="pool", request=Resources(),
                          limit=Resources(), isolation="partitioned", partition_template="3g.40gb")
    plan = device_plan(spec, enforcement="hami-core", gpus=("x",), partitions=(three_g,),
                       records={"x": GpuSpec(name="x", capacity=CAPACITY)})
    assert plan.containers[0].env == {"NVIDIA_VISIBLE_DEVICES": "void"} and plan.problems


def test_a_gpu_without_uuid_is_named_by_index_and_an_unknown_one_is_left_out() -> None:
    spec = AllocationSpec(allocation_id="a", namespace="d", pod="p", pool="pool", request=Resources(),
                          limit=Resources(), gpu_count=2)
    plan = device_plan(spec, enforcement="none", gpus=("x", "ghost"),
                       records={"x": GpuSpec(name="x", capacity=CAPACITY, index=3)})
    assert plan.containers[0].env == {"NVIDIA_VISIBLE_DEVICES": "3"}
    assert plan.problems == ("GPU ghost is unknown to discovery: left out",)


def test_a_bad_container_map_fails_closed() -> None:
    spec = AllocationSpec(allocation_id="a", namespace="d", pod="p", pool="pool", request=Resources(),
                          limit=Resources(), gpu_count=1, attributes={keys.CONTAINER_GPU_COUNT: '{"main": 5}'})
    plan = device_plan(spec, enforcement="hami-core", gpus=("g0",), records={g.name: g for g in node_gpus()})
    assert plan.containers == () and plan.annotations == {} and plan.problems
    assert plan.group_of("main") is None  # the skeleton gave it void: it sees nothing


def test_a_share_without_vram_or_compute_limit_gets_the_whole_device_under_hami_core() -> None:
    spec = AllocationSpec(allocation_id="a", namespace="d", pod="p", pool="pool", request=Resources(),
                          limit=Resources())
    plan = device_plan(spec, enforcement="hami-core", gpus=("g0",), records={g.name: g for g in node_gpus()})
    assert plan.containers[0].env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{CAPACITY.vram_bytes // MIB}m"
    assert plan.containers[0].env["CUDA_DEVICE_SM_LIMIT"] == "100"
    view = plan_view(plan)
    assert view["containers"][0]["container"] == "*" and view["runtime_class"] == "nvidia"


def test_the_book_uses_the_mode_the_pod_was_admitted_with_not_a_later_pool_change() -> None:
    book = AllocationBook()
    book.apply(decisions.NodeRegistered(at=NOW, node="n", pool="pool", gpus=node_gpus()))
    book.apply(decisions.PoolConfigured(at=NOW, pool="pool", config=PoolConfig(enforcement="tensor-fusion")))
    spec = AllocationSpec(allocation_id="a", namespace="d", pod="p", pool="pool", request=Resources(vram_bytes=2**30),
                          limit=Resources(vram_bytes=2**30), attributes={ENFORCEMENT_KEY: "hami-core"})
    grant = book.apply(decisions.AllocationGranted(at=NOW, spec=spec, node="n", gpus=("g0",), charges=()))
    assert grant is not None and grant.device is not None and grant.device.enforcement == "hami-core"
    assert grant.annotations["device.gpuledger.io/CUDA_DEVICE_MEMORY_LIMIT_0"] == "1024m"


def run_device_check(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any], str]:
    """benchmarks/device_check.py --fake in a process with exactly ``env`` (plus PATH)."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/device_check.py"), "--fake", str(CAPTURE),
                           "--node-gpus", "8", *args], env={**env, "PATH": os.environ.get("PATH", "")},
                          capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, json.loads(done.stdout), done.stderr


def test_the_fake_cuda_process_sees_its_gpu_and_cannot_allocate_beyond_its_vram_limit() -> None:
    vram = 10 * 2**30
    spec = AllocationSpec(allocation_id="a", namespace="default", pod="p", pool="pool",
                          request=Resources(milli_tflops=100_000, vram_bytes=vram),
                          limit=Resources(milli_tflops=247_250, vram_bytes=vram), isolation="hard",
                          attributes={ENFORCEMENT_KEY: "hami-core"})
    final, _ = bind(admit(pod(["main"]), spec, "hami-core"), spec, ("g0",), "hami-core")
    env = container_environment(final, "main", image_env=IMAGE_ENV)
    assert env["LD_PRELOAD"] == "/usr/local/vgpu/libvgpu.so"  # absent here: ld.so says so on stderr, goes on
    code, report, stderr = run_device_check(env, "--expect-devices", H100_UUID, "--expect-limit", str(vram))
    assert code == 0, stderr
    assert [d["uuid"] for d in report["devices"]] == [H100_UUID]
    device = report["devices"][0]
    assert device["total_bytes"] == device["allocated_bytes"] == vram and device["refused_beyond_limit"] is True
    assert device["sm_limit"] == 25  # 247.25 of 989 TFLOPS
    # without HAMi-core (mode none) the same share sees the whole 80 GB and nothing refuses
    spec_none = AllocationSpec(**{**{f: getattr(spec, f) for f in spec.__struct_fields__},
                                  "attributes": {ENFORCEMENT_KEY: "none"}})
    final, _ = bind(admit(pod(["main"]), spec_none, "none"), spec_none, ("g3",), "none")
    code, report, stderr = run_device_check(container_environment(final, "main", image_env=IMAGE_ENV),
                                            "--expect-limit", str(vram))
    assert code == 1 and "limit 0, expected" in stderr
    assert [d["uuid"] for d in report["devices"]] == [f"{H100_UUID[:-2]}03"]
    assert report["devices"][0]["allocated_bytes"] == H100["memory_total_bytes"]


def test_no_pod_is_admitted_before_the_pools_enforcement_is_known() -> None:
    from services.admission.review import review
    from services.admission.view import ClusterView
    from tests.unit.admission.builders import a_review

    raw = {"metadata": {"name": "p", "namespace": "default", "labels": {keys.ENABLED: "true"},
                        "annotations": {keys.TFLOPS_REQUEST: "10", keys.VRAM_REQUEST: "1Gi"}},
           "spec": {"containers": [{"name": "main", "image": "nvidia/cuda"}]}}
    verdict = review(a_review(raw), view=ClusterView(replayed=False))
    assert not verdict.allowed and verdict.code == 503 and verdict.field == "events" and verdict.spec is None
    admitted = review(a_review(raw), view=ClusterView(enforcement={"default": "hami-core"}))
    assert admitted.allowed and admitted.spec is not None
    assert admitted.spec.attributes[ENFORCEMENT_KEY] == "hami-core"
    paths = {op["path"] for op in admitted.patch}
    assert {"/spec/runtimeClassName", "/spec/volumes", "/spec/containers/0/env"} <= paths


def test_a_resize_recomputes_the_limits_and_keeps_the_devices() -> None:
    book = AllocationBook()
    book.apply(decisions.NodeRegistered(at=NOW, node="n", pool="pool", gpus=node_gpus()))
    one = Resources(milli_tflops=98_900, vram_bytes=2**30)
    spec = AllocationSpec(allocation_id="a", namespace="d", pod="p", pool="pool", request=one, limit=one,
                          isolation="hard", attributes={ENFORCEMENT_KEY: "hami-core"})
    first = book.apply(decisions.AllocationGranted(at=NOW, spec=spec, node="n", gpus=("g3",), charges=()))
    assert first is not None
    cache = "device.gpuledger.io/CUDA_DEVICE_MEMORY_SHARED_CACHE"
    assert first.annotations[cache] == "/var/run/gpuledger-vgpu/pod-1024m-10.cache"
    two = Resources(milli_tflops=197_800, vram_bytes=2 * 2**30)
    grant = book.apply(decisions.AllocationResized(at=NOW, allocation_id="a", namespace="d", pool="pool",
                                                   request=two, limit=two, charges=()))
    assert grant is not None and grant.node == "n" and grant.gpus == ("g3",)
    assert grant.annotations["device.gpuledger.io/CUDA_DEVICE_MEMORY_LIMIT_0"] == "2048m"
    assert grant.annotations["device.gpuledger.io/CUDA_DEVICE_SM_LIMIT"] == "20"
    assert grant.annotations[keys.EFFECTIVE_HARD_SM_PERCENT] == "20"
    # HAMi-core keeps the limits of the process that created a cache file, and the pod's emptyDir
    # outlives a container restart: the resized limits need a new file to take effect
    assert grant.annotations[cache] == "/var/run/gpuledger-vgpu/pod-2048m-20.cache"
    assert book.apply(decisions.AllocationResized(at=NOW, allocation_id="gone", namespace="d", pool="pool",
                                                  request=two, limit=two, charges=())) is None


def test_a_container_map_naming_no_container_is_refused_at_admission() -> None:
    from services.admission.review import review
    from services.admission.view import ClusterView
    from tests.unit.admission.builders import a_review

    raw = {"metadata": {"name": "p", "namespace": "default", "labels": {keys.ENABLED: "true"},
                        "annotations": {keys.TFLOPS_REQUEST: "10", keys.VRAM_REQUEST: "1Gi", keys.GPU_COUNT: "2",
                                        keys.INJECT_CONTAINER: "main",
                                        keys.CONTAINER_GPU_COUNT: '{"Main/../x": 1, "main": 1}'}},
           "spec": {"containers": [{"name": "main", "image": "nvidia/cuda"}]}}
    verdict = review(a_review(raw), view=ClusterView(enforcement={"default": "hami-core"}))
    assert not verdict.allowed and verdict.code == 400 and verdict.field == keys.CONTAINER_GPU_COUNT
    assert "'Main/../x' is not a container name" in verdict.message
    # TensorFusion's runtime maps it itself (A25: logged at bind, as TensorFusion): admitted
    assert review(a_review(raw), view=ClusterView(enforcement={"default": "tensor-fusion"})).allowed


def test_why_shows_each_limit_once_as_docs_runtime_says() -> None:
    from services.cli.output import device_lines

    share = Resources(vram_bytes=10 * 2**30, compute_milli_percent=25_000)
    spec = AllocationSpec(allocation_id="a", namespace="default", pod="train", pool="pool", request=share,
                          limit=share, isolation="hard", attributes={keys.INJECT_CONTAINER: "main"})
    plan = device_plan(spec, enforcement="hami-core", gpus=("g0",), records={g.name: g for g in node_gpus()})
    assert plan.containers[0].env["CUDA_DEVICE_SM_LIMIT_0"] == "25"
    assert device_lines(plan_view(plan))[1] == (f"  container main: NVIDIA_VISIBLE_DEVICES={H100_UUID}; "
                                                "CUDA_DEVICE_MEMORY_LIMIT_0=10240m, CUDA_DEVICE_SM_LIMIT=25")

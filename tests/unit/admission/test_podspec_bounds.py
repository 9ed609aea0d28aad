"""compose() applies the contract's bounds and names the annotation: 8Ei, 1e999999999, 5,000 digits."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import bounds, guard, quantity
from services.podspec import PodSpecError, compose, keys
from tests.unit.admission.builders import MOCK_POOL, a_pod

RES = {"tflops-request": "1"}


def _denied(annotations: dict[str, str], **pod: object) -> PodSpecError:
    with pytest.raises(PodSpecError) as info:
        compose(a_pod(annotations, **pod), pool_defaults=MOCK_POOL)  # type: ignore[arg-type]
    assert len(str(info.value).encode()) <= 1024
    return info.value


@pytest.mark.parametrize(("key", "limit"), [
    ("vram-request", bounds.MAX_VRAM_BYTES), ("vram-limit", bounds.MAX_VRAM_BYTES),
    ("tflops-request", bounds.MAX_MILLI_TFLOPS), ("tflops-limit", bounds.MAX_MILLI_TFLOPS),
])
def test_per_gpu_resource_bounds_boundary_and_one_past(key: str, limit: int) -> None:
    at_limit = quantity.format_bytes(limit) if "vram" in key else quantity.format_milli(limit)
    spec = compose(a_pod({key: at_limit, **({} if "tflops" in key else RES)}), pool_defaults=MOCK_POOL)
    assert limit in (spec.request.vram_bytes, spec.limit.vram_bytes, spec.request.milli_tflops, spec.limit.milli_tflops)
    one_past = str(limit + 1) if "vram" in key else f"{limit + 1}m"
    error = _denied({key: one_past, **({} if "tflops" in key else RES)})
    assert error.field == keys.key(key) and error.value == one_past and "per-GPU bound" in str(error)


def test_8ei_vram_is_denied_naming_the_annotation() -> None:
    error = _denied({"tflops-request": "1", "vram-request": "8Ei"})
    assert error.field == keys.VRAM_REQUEST and "8Ei" in str(error) and "4Ti" in str(error)


def test_huge_exponent_and_digit_runs_are_denied_with_our_message() -> None:
    assert _denied({"tflops-request": "1e999999999"}).field == keys.TFLOPS_REQUEST
    indices = _denied({**RES, "gpu-indices": "9" * 5000})
    assert indices.field == keys.GPU_INDICES and bounds.TRUNCATION_MARKER in str(indices)
    assert "outside [0, 1023]" in str(_denied({**RES, "gpu-indices": "0,1024"}))
    assert "at most 1024" in str(_denied({**RES, "gpu-indices": ",".join(map(str, range(1025)))}))
    count = _denied({**RES, "gpu-count": "two"})
    assert count.field == keys.GPU_COUNT and "strconv" not in str(count) and "'two'" in str(count)


@pytest.mark.parametrize(("pod", "field", "text"), [
    ({"name": "n" * 254}, "metadata.name", "not a valid Kubernetes pod name"),
    ({"uid": "u" * 513}, "metadata.uid", "outside gpuledger's bounds"),
])
def test_names_and_ids_beyond_kubernetes_limits_name_the_pod_field(pod: dict[str, str], field: str, text: str) -> None:
    error = _denied(RES, **pod)
    assert error.field == field and text in str(error)


def test_names_at_the_limit_are_accepted() -> None:
    spec = compose(a_pod(RES, name="n" * 253, uid="u" * 512), pool_defaults=MOCK_POOL)
    assert len(spec.pod) == 253 and len(spec.allocation_id) == 512


def test_attributes_over_the_byte_limit_name_the_annotations() -> None:
    error = _denied({**RES, "inject-container": "c" * (bounds.MAX_ATTRIBUTES_BYTES + 1)})
    assert error.field in ("metadata.annotations", keys.INJECT_CONTAINER)


_ANY_VALUE = st.one_of(
    st.text(max_size=12),
    st.from_regex(r"[+-]?[0-9]{0,30}(\.[0-9]{0,5})?([eE][+-]?[0-9]{1,12}|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?",
                  fullmatch=True),
    st.sampled_from(["9" * 5000, "1e999999999", "8Ei", "0," * 3000, "²", "٣", "1_000", "0x10", " 1 ", "true"]),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(sorted({*keys.RESOURCE_KEYS, keys.GPU_COUNT, keys.GPU_INDICES, keys.QOS,
                                               keys.ISOLATION, keys.POOL, keys.GPU_MODEL, keys.VENDOR,
                                               keys.ENABLED_REPLICAS, keys.GANG_MIN_MEMBERS, keys.GANG_TIMEOUT,
                                               keys.GANG_ENABLED, keys.INJECT_CONTAINER, keys.DEDICATED_GPU})),
                       _ANY_VALUE, max_size=6))
def test_any_annotation_text_composes_within_bounds_or_is_one_pod_spec_error(annotations: dict[str, str]) -> None:
    try:
        spec = compose(a_pod({"tflops-request": "1", **annotations}), pool_defaults=MOCK_POOL)
    except PodSpecError as exc:
        assert exc.field and len(str(exc).encode()) <= 1024
        return
    assert guard.check_message(spec) is spec

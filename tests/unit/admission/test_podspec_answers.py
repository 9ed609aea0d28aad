"""Issue 28 items 8 and 11 in the Pod parser shared by the webhook, submit and simulate: a misspelled
``tensor-fusion.ai/*`` annotation is refused naming the closest key, an unused TensorFusion key passes
with a note, names Kubernetes would refuse are refused naming the field, full-width digits are not a
quantity."""

from __future__ import annotations

import base64

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from events import names
from services.admission.review import response_body, review
from services.admission.view import ClusterView
from services.podspec import PodSpecError, annotation_notes, compose, keys
from services.podspec.known import READ, TENSORFUSION, UNUSED
from tests.unit.admission.builders import MOCK_POOL, a_pod, a_review

RES = {"tflops-request": "10", "vram-request": "4Gi"}


def _denied(pod: dict[str, object]) -> PodSpecError:
    with pytest.raises(PodSpecError) as info:
        compose(pod, pool_defaults=MOCK_POOL)
    return info.value


def test_a_misspelled_annotation_is_refused_with_the_closest_key() -> None:
    error = _denied(a_pod({"tflops-requst": "10", "vram-request": "4Gi"}))
    assert error.field == "tensor-fusion.ai/tflops-requst"
    assert "did you mean tensor-fusion.ai/tflops-request?" in str(error)
    far = _denied(a_pod({**RES, "zzzzzz": "1"}))
    assert far.field == "tensor-fusion.ai/zzzzzz" and "docs/annotations.md" in str(far)


def test_an_unused_tensorfusion_key_passes_with_a_note_and_other_domains_pass_silently() -> None:
    pod = a_pod({**RES, "hourly-pricing": "2.5", "example.com/tflops-requst": "x"})
    spec = compose(pod, pool_defaults=MOCK_POOL)
    assert spec.request.milli_tflops == 10_000 and "tensor-fusion.ai/hourly-pricing" not in spec.attributes
    (note,) = annotation_notes(pod)
    assert note.startswith("tensor-fusion.ai/hourly-pricing: a TensorFusion annotation (PricingAnnotation)")
    assert annotation_notes(a_pod(RES)) == ()


def test_the_key_sets_cover_what_gpuledger_reads_and_writes() -> None:
    assert keys.TFLOPS_REQUEST in READ and keys.GANG_GROUP_KEY in READ and keys.EFFECTIVE_HARD_SM_PERCENT in READ
    assert "tensor-fusion.ai/hourly-pricing" in UNUSED and keys.TFLOPS_REQUEST not in UNUSED
    assert all(key.startswith("tensor-fusion.ai/") for key in TENSORFUSION)


def test_the_webhook_denies_a_misspelled_key_and_warns_about_an_unused_one() -> None:
    view = ClusterView(pool=MOCK_POOL)
    denied = review(a_review(a_pod({"tflops-requst": "10", "vram-request": "4Gi"})), view=view)
    assert not denied.allowed and denied.code == 400 and "did you mean tensor-fusion.ai/tflops-request?" in \
        denied.message
    allowed = review(a_review(a_pod({**RES, "disable-features": "gpu-opt"})), view=view)
    body = msgspec.json.decode(response_body(allowed))["response"]
    assert body["allowed"] and body["warnings"] == allowed.warnings and len(body["warnings"]) == 1
    assert "tensor-fusion.ai/disable-features" in body["warnings"][0]
    assert base64.b64decode(body["patch"])


BAD_NAMES = ["Upper-Case", "has space", "a/b", "..", "Team_B", "<script>", "a\tb", "x\u202ey", "-leading-dash",
             "trailing-", "ü", ""]


@pytest.mark.parametrize("bad", [*BAD_NAMES, "ns.with.dots", "x" * 64])
def test_a_namespace_kubernetes_would_refuse_is_refused_naming_the_field(bad: str) -> None:
    pod = a_pod(RES)
    pod["metadata"]["namespace"] = bad or "--"  # an empty namespace is "default"
    error = _denied(pod)
    assert error.field == "metadata.namespace" and "not a valid Kubernetes namespace name" in str(error)


@pytest.mark.parametrize("bad", [n for n in BAD_NAMES if n and n != "trailing-"])
def test_a_pod_or_pool_name_kubernetes_would_refuse_is_refused(bad: str) -> None:
    assert _denied(a_pod(RES, name=bad)).field == "metadata.name"
    assert _denied(a_pod({**RES, "gpupool": bad})).field == keys.POOL


def test_valid_names_pass_and_a_generate_name_prefix_may_end_in_a_dash() -> None:
    spec = compose(a_pod({**RES, "gpupool": "pool.a-1"}, name="web-0.x"), pool_defaults=MOCK_POOL)
    assert (spec.pod, spec.pool) == ("web-0.x", "pool.a-1")
    assert compose(a_pod(RES, name="", generate_name="train-"), pool_defaults=MOCK_POOL).pod == "train-"
    assert _denied(a_pod(RES, name="", generate_name="Train-")).field == "metadata.generateName"


def test_full_width_digits_are_not_a_quantity() -> None:
    error = _denied(a_pod({"tflops-request": "１０", "vram-request": "4Gi"}))
    assert error.field == keys.TFLOPS_REQUEST and "not a Kubernetes quantity" in str(error)


@given(st.text(max_size=70))
def test_the_validator_agrees_with_the_rfc_1123_label_grammar(text: str) -> None:
    ok = (0 < len(text) <= 63 and all(c in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in text)
          and text[0] != "-" and text[-1] != "-")
    assert names.is_valid("namespace", text) is ok

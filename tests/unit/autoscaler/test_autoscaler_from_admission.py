"""The WorkloadProfile's autoScalingConfig travels from admission to the autoscaler intact."""

from __future__ import annotations

from services.autoscaler.config import from_attributes
from services.podspec import compose


def test_profile_autoscaling_config_reaches_the_autoscaler() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1",
                     "labels": {"tensor-fusion.ai/enabled": "true"},
                     "annotations": {"tensor-fusion.ai/workload-profile": "wp"}},
        "spec": {"containers": [{"name": "c"}]},
    }
    profile = {"metadata": {"name": "wp"}, "spec": {
        "resources": {"requests": {"tflops": "10", "vram": "1Gi"}, "limits": {"tflops": "20", "vram": "2Gi"}},
        "autoScalingConfig": {
            "autoSetResources": {"enable": True, "targetResource": "compute", "targetComputePercentile": "0.8"},
            "cronScalingRules": [{"enable": True, "name": "night", "start": "0 22 * * *", "end": "0 6 * * *",
                                  "desiredResources": {"requests": {"tflops": "5", "vram": "1Gi"},
                                                       "limits": {"tflops": "5", "vram": "1Gi"}}}],
        },
    }}
    config = from_attributes(compose(pod, profile=profile).attributes)
    assert config.auto_set_resources is not None and config.auto_set_resources.enable
    assert config.auto_set_resources.target_resource == "compute"
    assert float(config.auto_set_resources.target_compute_percentile) == 0.8
    assert len(config.cron_scaling_rules) == 1 and config.cron_scaling_rules[0].name == "night"


def test_pod_without_profile_carries_no_autoscaling_config() -> None:
    annotations = {"tensor-fusion.ai/tflops-request": "1", "tensor-fusion.ai/vram-request": "1Gi"}
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": annotations},
           "spec": {"containers": [{"name": "c"}]}}
    assert "gpuledger.io/autoscaling-config" not in compose(pod).attributes

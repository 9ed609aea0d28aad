"""The single error type of the Pod parser: bad input, naming the field and the value.

A :class:`PodSpecError` is what the webhook turns into a denial and the CLI into exit code 2
(``{"error", "field"}``); it never signals a bug.
"""

from __future__ import annotations


class PodSpecError(ValueError):
    """A Pod, WorkloadProfile or context value cannot be turned into an allocation request.

    ``field`` is the annotation key (``tensor-fusion.ai/tflops-request``) or the object path
    (``spec.containers[0].resources.requests.cpu``, ``WorkloadProfile.spec.gpuCount``);
    ``value`` is the offending raw value as a string ("" when absent).
    """

    def __init__(self, message: str, *, field: str, value: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.value = value

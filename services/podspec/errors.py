"""The single error type of the Pod parser: bad input, naming the field and the value.

A :class:`PodSpecError` is what the webhook turns into a denial and the CLI into exit code 2
(``{"error", "field"}``); it never signals a bug.
"""

from __future__ import annotations

from events.bounds import TRUNCATION_MARKER, echo

SHOWN_VALUE = 80
"""Characters of an offending value quoted in a message; the rest is cut with a marker."""

MAX_MESSAGE = 1024
"""UTF-8 bytes of a message (a denial travels back to the API server and into ``kubectl``)."""


class PodSpecError(ValueError):
    """A Pod, WorkloadProfile or context value cannot be turned into an allocation request.

    ``field`` is the annotation key (``tensor-fusion.ai/tflops-request``) or the object path
    (``spec.containers[0].resources.requests.cpu``, ``WorkloadProfile.spec.gpuCount``);
    ``value`` is the offending raw value as a string ("" when absent). A value longer than
    :data:`SHOWN_VALUE` characters is quoted cut in the message (``'9999…[truncated]'``), and the
    message is at most :data:`MAX_MESSAGE` bytes, so a 5,000-digit annotation cannot flood a denial.
    """

    def __init__(self, message: str, *, field: str, value: str = "") -> None:
        if len(value) > SHOWN_VALUE:
            short = value[:SHOWN_VALUE] + TRUNCATION_MARKER
            message = message.replace(repr(value), repr(short)).replace(value, short)
        super().__init__(echo(message, MAX_MESSAGE))
        self.field = field
        self.value = value

"""gpuledger's message contract: intents, events, value objects, subjects and the codec.

The public surface every service shares. Imports only msgspec and the standard library.
"""

from events import codec, decisions, intents, quantity, subjects, values
from events.base import SCHEMA_VERSION, Event, Intent

__all__ = ["SCHEMA_VERSION", "Event", "Intent", "codec", "decisions", "intents", "quantity", "subjects", "values"]

"""Unit tests of the event-log adapters that need no database (projection, snapshot policy)."""

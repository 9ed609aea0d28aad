"""Alembic migrations of the gpuledger PostgreSQL schema (env.py, versions/); shipped in the wheel."""

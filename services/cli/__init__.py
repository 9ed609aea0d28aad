"""The ``gpuledger`` command line: one Typer app; each area registers its commands from its own module."""

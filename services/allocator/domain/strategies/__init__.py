"""Placement strategies, one family per module; the registry that names them is ``domain.profile``."""

"""Filter plugins, one concern per module; the registry that orders them is ``domain.profile``."""

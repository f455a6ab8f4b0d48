"""Configuration: value grammar, settings and sweeps, resolved once at load."""

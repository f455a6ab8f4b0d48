"""reaper: a garbage-collection daemon that keeps a control plane's PostgreSQL tables bounded."""

from __future__ import annotations

__version__ = "0.1.0"

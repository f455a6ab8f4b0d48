"""For development and the demo: an embedded PostgreSQL and the demo data."""

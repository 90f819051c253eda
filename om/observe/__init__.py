"""Observability: metrics (one registry per node, served at /prom) and their endpoint."""

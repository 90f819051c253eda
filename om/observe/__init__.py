"""Observability: metrics (one registry per node, served at /prom) and their endpoint,
the audit log, and trace records (docs/TRACES.md)."""

"""Prometheus metrics: the operator's own (reconciles, API writes, Slurm commands) and each
cluster's Slurm state as the reconcile observed it. Served on /metrics (metrics/endpoint.py)."""

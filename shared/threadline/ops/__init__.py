"""Operating a service: its Prometheus metrics and its ``/metrics``, ``/healthz`` and ``/readyz``
endpoints (docs/operations.md)."""

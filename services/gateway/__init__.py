"""gateway: the stateless HTTP service (API, SSE, Studio) in front of the ingress topic (docs/gateway.md)."""

"""The HTTP gateway: Mastra's Agent thread API over HTTP and Server-Sent Events, with API-key or
JWT tenancy, and Threadline Studio (docs/gateway.md). Run as ``python -m threadline.services.gateway``."""

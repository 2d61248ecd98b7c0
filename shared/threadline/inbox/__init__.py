"""The notification inbox: delivery policies, rendering and digests (pure logic)."""

"""Example agents and the demo (``make demo``)."""

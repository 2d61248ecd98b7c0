"""Threadline: Mastra's agent model as event-driven services over Kafka and Postgres."""

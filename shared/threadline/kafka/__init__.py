"""Kafka transport: one producer per process, the keyed consumer, topic administration."""

from threadline.kafka.admin import TopicAdmin
from threadline.kafka.consumer import KeyedConsumer, Record
from threadline.kafka.producer import Producer

__all__ = ["KeyedConsumer", "Producer", "Record", "TopicAdmin"]

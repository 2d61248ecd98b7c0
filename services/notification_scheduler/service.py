"""notification-scheduler: owns the notification inbox (issue 5). For now it follows the
lifecycle topic and logs when threads go idle, the moment the inbox will flush held records."""

from __future__ import annotations

from threadline.events import LifecycleEvent
from threadline.events.codec import decode
from threadline.kafka.consumer import Record
from threadline.logging import get_logger
from threadline.service import Service

log = get_logger(__name__)


class NotificationScheduler(Service):
    name = "notification_scheduler"

    def topics_in(self) -> list[str]:
        return [self.topics.lifecycle]

    async def handle(self, record: Record) -> None:
        event = decode(record.value, _ADAPTER)
        if event.type == "thread_idle":
            log.debug("thread idle", thread_id=event.thread_id)


from pydantic import TypeAdapter  # noqa: E402

_ADAPTER: TypeAdapter[LifecycleEvent] = TypeAdapter(LifecycleEvent)

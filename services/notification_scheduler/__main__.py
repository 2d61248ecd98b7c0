"""Run one notification_scheduler instance: ``python -m threadline.services.notification_scheduler``."""

from threadline.service import run

from .service import NotificationScheduler

run(NotificationScheduler)

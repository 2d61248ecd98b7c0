from services.notification_scheduler.service import NotificationScheduler
from threadline.service import run

run(NotificationScheduler)

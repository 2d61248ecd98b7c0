"""Run one notification_scheduler instance: ``python -m threadline.services.notification_scheduler``
or ``threadline-notification-scheduler``."""

from threadline.service import run

from .service import NotificationScheduler


def main() -> None:
    """The ``threadline-notification-scheduler`` entry point: run one instance until SIGTERM."""
    run(NotificationScheduler)


if __name__ == "__main__":
    main()

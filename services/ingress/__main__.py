"""Run one ingress instance: ``python -m threadline.services.ingress``
or ``threadline-ingress``."""

from threadline.service import run

from .service import Ingress


def main() -> None:
    """The ``threadline-ingress`` entry point: run one instance until SIGTERM."""
    run(Ingress)


if __name__ == "__main__":
    main()

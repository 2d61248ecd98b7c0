"""Run one ingress instance: ``python -m threadline.services.ingress``."""

from threadline.service import run

from .service import Ingress

run(Ingress)

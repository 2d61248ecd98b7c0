from services.ingress.service import Ingress
from threadline.service import run

run(Ingress)

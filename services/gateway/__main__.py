"""Run one gateway instance: ``python -m threadline.services.gateway`` or ``threadline-gateway``."""

from threadline.gateway.server import main

if __name__ == "__main__":
    main()

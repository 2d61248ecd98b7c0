"""The four Threadline services, run as ``python -m threadline.services.<name>`` or
``threadline serve <name>``.

``NAMES`` lists them in start order. Their code lives in the repository's top-level
``services/<name>/`` folders; the wheel installs each as ``threadline/services/<name>/``
(``[tool.hatch.build.targets.wheel]`` in ``pyproject.toml``), so nothing named ``services``
is installed at the top level. In a source checkout (an editable install, the Docker image)
this package's ``__path__`` also covers that folder, so the same module names work there.
"""

from __future__ import annotations

from pathlib import Path

NAMES = ("ingress", "run_orchestrator", "processor_worker", "notification_scheduler")
"""The services, in start order (the package name of each under ``threadline.services``)."""
HTTP = ("gateway",)
"""Services that consume no topic: the HTTP gateway (docs/gateway.md), started after ``NAMES``."""
ALL = NAMES + HTTP

_package = Path(__file__).resolve().parent
_checkout = _package.parents[2]  # <repo>/shared/threadline/services -> <repo>
if (_checkout / "pyproject.toml").is_file() and (_checkout / "services").is_dir():
    __path__.append(str(_checkout / "services"))  # a source checkout: serve the top-level folder

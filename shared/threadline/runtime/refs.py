"""Call-level processors, tool hooks and ``prepare_step`` given as objects (Mastra's per-call options,
decision 73).

A request travels as JSON, so code cannot cross the wire. Code that calls the client in-process
— in the agents module, which every service also loads — may still pass the objects themselves:
the client replaces each with a reference ``{"ref": "module:name"}`` to where the agents module
defines it (a module-level name, or a top-level function's or class's own ``module:qualname``),
and the worker imports that name back. A processor the agents module does not define at module
level goes by its ``id`` (the catalogue: the agents' processors and the module's ``processors``)
only when the catalogue's processor of that id is the same one (the object, or one of its class
with the same attributes): another object under a registered id is refused, never silently
replaced by the registered one. Anything else is refused at the client, before anything is sent. The worker resolves references
only inside the agents module's package (never an arbitrary import path from a request).

Options concerned: ``input_processors``, ``output_processors``, ``error_processors`` (lists),
``hooks`` and ``prepare_step`` (camelCase accepted).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any

from threadline.errors import ConfigurationError

LISTS = ("input_processors", "output_processors", "error_processors")
SINGLE = ("hooks", "prepare_step")
_CAMEL = {"inputProcessors": "input_processors", "outputProcessors": "output_processors",
          "errorProcessors": "error_processors", "prepareStep": "prepare_step"}


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def reference(obj: object, package: str, *, what: str) -> dict[str, str]:
    """``{"ref": "module:name"}`` for an object the agents ``package`` defines.

    Raises:
        ConfigurationError: the object is not reachable by a name of the agents package.
    """
    qualname = getattr(obj, "__qualname__", None)
    module = getattr(obj, "__module__", None)
    if (isinstance(qualname, str) and isinstance(module, str) and "<" not in qualname
            and _inside(module, package) and _lookup(module, qualname) is obj):
        return {"ref": f"{module}:{qualname}"}
    for name, mod in list(sys.modules.items()):
        if mod is None or not _inside(name, package):
            continue
        for attr, value in list(vars(mod).items()):
            if value is obj and not attr.startswith("__"):
                return {"ref": f"{name}:{attr}"}
    raise ConfigurationError(
        f"{what}: a call-level object must be defined at module level in the agents module "
        f"{package!r} (the services load it too), or be named by a registered id")


def _lookup(module: str, qualname: str) -> object:
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return found


def encode(options: Mapping[str, Any] | None, package: str) -> dict[str, Any]:
    """``options`` with call-level objects replaced by references (strings and references kept).

    Raises:
        ConfigurationError: an object the agents package does not define (see the module).
    """
    out = {_CAMEL.get(k, k): v for k, v in (options or {}).items()}
    for key in LISTS:
        if isinstance(out.get(key), list | tuple):
            out[key] = [p if isinstance(p, str | Mapping) else _processor(p, package, key) for p in out[key]]
        elif out.get(key) is not None and not isinstance(out[key], list | tuple):
            raise ConfigurationError(f"{key}: a call-level processor list is a list")
    for key in SINGLE:
        value = out.get(key)
        if value is not None and not isinstance(value, str) and not _is_ref(value):
            out[key] = reference(value, package, what=key)
    return out


def _processor(p: Any, package: str, key: str) -> object:
    try:
        return reference(p, package, what=key)
    except ConfigurationError:
        pid = getattr(p, "id", None)
        if not isinstance(pid, str):
            raise
        registered = _registered(package).get(pid)
        if registered is None:
            raise ConfigurationError(
                f"{key}: processor {pid!r} is neither defined at module level in the agents module {package!r} "
                "nor registered under its id there (the services could not run it)") from None
        if not same_processor(registered, p):
            raise ConfigurationError(
                f"{key}: processor {pid!r} is not the one the agents module registers under that id (another "
                "class or other settings); the services would run the registered one instead: define this "
                f"object at module level in {package!r}, or give it an id of its own") from None
        return pid  # looked up in the worker's catalogue: the same processor


def same_processor(registered: object, given: object) -> bool:
    """Whether ``given`` would behave as ``registered``: the same object, or one of the same
    class with the same attributes (a fresh ``Shout()`` for the registered ``Shout()``)."""
    if registered is given:
        return True
    mine, theirs = getattr(given, "__dict__", None), getattr(registered, "__dict__", None)
    return type(registered) is type(given) and mine is not None and mine == theirs


def _registered(package: str) -> dict[str, Any]:
    """The processors the agents module lets calls name by id (its agents' and ``processors``)."""
    from threadline.runtime.registry import load_agents, load_catalogue

    return load_catalogue(package, load_agents(package)).processors


def _is_ref(value: object) -> bool:
    return isinstance(value, Mapping) and set(value) == {"ref"} and isinstance(value["ref"], str)


def resolve(value: Any, package: str | None) -> Any:
    """The object a reference names (anything else is returned as it is).

    Raises:
        ConfigurationError: a reference outside the agents package, or to no object.
    """
    if not _is_ref(value):
        return value
    module, _, qualname = value["ref"].partition(":")
    if package is None or not _inside(module, package) or not qualname:
        raise ConfigurationError(f"call-level reference {value['ref']!r} is not inside the agents module {package!r}")
    found = _lookup(module, qualname)
    if found is None:
        raise ConfigurationError(f"call-level reference {value['ref']!r} names nothing")
    return found


def resolve_options(options: dict[str, Any], package: str | None) -> dict[str, Any]:
    """Run options with every reference of :data:`LISTS` and :data:`SINGLE` resolved (a copy
    when something was; the same dict otherwise)."""
    if not any(_is_ref(options.get(k)) for k in SINGLE) and not any(
            isinstance(options.get(k), list) and any(_is_ref(p) for p in options[k]) for k in LISTS):
        return options
    out = dict(options)
    for key in SINGLE:
        out[key] = resolve(out.get(key), package)
    for key in LISTS:
        if isinstance(out.get(key), list):
            out[key] = [resolve(p, package) for p in out[key]]
    return out

"""The public API: ``threadline.__all__`` is exactly the names below, sorted, and each resolves.

Adding or removing a public name is a decision: change the list here together with
``shared/threadline/__init__.py``.
"""

from __future__ import annotations

import importlib
import importlib.resources
import inspect

import threadline

PUBLIC = [
    "Agent",
    "ConfigurationError",
    "InvalidEventError",
    "MessageList",
    "ModelCallError",
    "NotConnectedError",
    "Processor",
    "RequestFailed",
    "RunError",
    "SendResult",
    "Settings",
    "StaleWriterError",
    "ThreadSubscription",
    "ThreadlineClient",
    "ThreadlineError",
    "Tool",
    "ToolContext",
    "ToolHooks",
    "TripWire",
    "UnknownEventError",
    "create_tool",
    "get_settings",
    "inbox_tool",
    "make_message",
    "text_of",
    "tool",
]


def test_all_is_the_public_list_sorted() -> None:
    assert threadline.__all__ == PUBLIC
    assert threadline.__all__ == sorted(threadline.__all__)


def test_every_public_name_resolves_to_the_object_of_its_home_module() -> None:
    for name in PUBLIC:
        value = getattr(threadline, name)
        home = importlib.import_module(threadline._WHERE[name])
        assert value is getattr(home, name), name
    assert set(threadline._WHERE) == set(PUBLIC)


def test_star_import_gives_exactly_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from threadline import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == PUBLIC


def test_errors_share_one_root() -> None:
    for name in PUBLIC:
        value = getattr(threadline, name)
        if inspect.isclass(value) and issubclass(value, Exception) and name != "TripWire":
            assert issubclass(value, threadline.ThreadlineError), name


def test_unknown_names_raise_attribute_error() -> None:
    try:
        threadline.NoSuchThing  # noqa: B018 - the attribute access is the test
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("threadline.NoSuchThing resolved")


def test_the_package_ships_its_type_marker() -> None:
    assert (importlib.resources.files("threadline") / "py.typed").is_file()

"""Thread signals, as the runtime uses them: defined in :mod:`threadline.events.signals` (below
the store, which builds them too) and re-exported here."""

from threadline.events.chunks import echo_chunk
from threadline.events.signals import (
    DEFAULT_TAGS,
    LEGACY_TYPES,
    SIGNAL_TYPES,
    contents_parts,
    escape_attr,
    escape_text,
    normalize_type,
    render_for_model,
    render_markup,
    signal_from_message,
    signal_to_message,
)

__all__ = ["DEFAULT_TAGS", "LEGACY_TYPES", "SIGNAL_TYPES", "contents_parts", "echo_chunk", "escape_attr",
           "escape_text", "normalize_type", "render_for_model", "render_markup",
           "signal_from_message", "signal_to_message"]

"""The README's recipe for a plain Kafka client (a thread's chunk-topic name) equals the code's rule."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from threadline.topics import Topics

README = Path(__file__).resolve().parents[2] / "README.md"


def _recipe():
    block = next(b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if "def chunk_topic" in b)
    scope: dict = {}
    exec(block, scope)  # the documented snippet, as a reader would paste it
    return scope["chunk_topic"]


chunk_topic = _recipe()


def test_the_documented_example():
    expected = "threadline.chunks.user-1.t-1.735946ef8da2"
    assert chunk_topic("user-1", "t-1") == expected == Topics("threadline").chunks("user-1", "t-1")


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1, max_size=300), st.text(min_size=1, max_size=300), st.sampled_from(["threadline", "tl-x.y"]))
def test_the_recipe_is_the_rule(resource, thread, prefix):
    assert chunk_topic(resource, thread, prefix) == Topics(prefix).chunks(resource, thread)

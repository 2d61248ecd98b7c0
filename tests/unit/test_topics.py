import re

import pytest

from threadline.topics import MAX_TOPIC_LEN, Topics, split_thread_key, thread_key


def test_thread_key_round_trips_and_cannot_collide():
    assert thread_key("res-1", "th-1") == "res-1:th-1"
    assert split_thread_key(thread_key("a:b", "c")) == ("a:b", "c")
    assert thread_key("a:b", "c") != thread_key("a", "b:c")


@pytest.mark.parametrize("resource,thread", [
    ("res-1", "th-1"), ("user@example.com", "thread/with spaces"), ("ü" * 300, "x" * 300),
    ("a.b", "c"), ("a", "b.c"), ("", "../../etc"),
])
def test_chunk_topic_names_are_legal_and_distinct(resource, thread):
    topics = Topics("threadline")
    name = topics.chunks(resource, thread)
    assert re.fullmatch(r"[a-zA-Z0-9._-]+", name)
    assert len(name) <= MAX_TOPIC_LEN
    assert name != topics.chunks(resource + "x", thread)


def test_chunk_topic_distinguishes_ids_that_sanitise_alike():
    topics = Topics("p")
    assert topics.chunks("a b", "c") != topics.chunks("a_b", "c")
    assert topics.chunks("a.b", "c") != topics.chunks("a", "b.c")

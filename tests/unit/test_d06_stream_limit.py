"""D06 (pure part): a gateway serves at most half the descriptors left at its start as streams
(decision 223, ``threadline.gateway.capacity``), its setting when that is lower."""

from __future__ import annotations

import resource

import pytest

from threadline.gateway.capacity import descriptors, stream_limit

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("setting", "limit", "open_now", "expected"), [
    (10_000, 256, 16, 120),  # ulimit -n 256: half of the 240 left
    (10_000, 1_048_576, 30, 10_000),  # a container's usual limit: the setting
    (3, 256, 16, 3),  # a lower setting stays
    (10_000, 20, 19, 1),  # never none
    (10_000, resource.RLIM_INFINITY, 16, 10_000),  # no limit at all
])
def test_d06_the_stream_limit_fits_the_descriptors(setting, limit, open_now, expected):
    assert stream_limit(setting, descriptor_limit=limit, descriptors_open=open_now) == expected


def test_d06_this_process_descriptors_are_read():
    limit, open_now = descriptors()
    assert limit == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert open_now >= 3  # stdin, stdout, stderr at least

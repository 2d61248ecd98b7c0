"""The published JSON Schemas (docs/schemas) match the event models: a change of the wire format
must update them (``threadline schemas``) — and bump SCHEMA_VERSION when it is not additive."""

from pathlib import Path

import orjson

from threadline.events.base import SCHEMA_VERSION, SCHEMA_VERSIONS
from threadline.events.schemas import schemas

DOCS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def test_published_schemas_match_the_models():
    current = schemas()
    published = {p.stem: orjson.loads(p.read_bytes()) for p in DOCS.glob("*.json")}
    assert sorted(published) == sorted(current)
    for name, schema in current.items():
        assert published[name] == orjson.loads(orjson.dumps(schema)), f"docs/schemas/{name}.json is stale"


def test_every_schema_version_is_described():
    assert set(SCHEMA_VERSIONS) == set(range(1, SCHEMA_VERSION + 1))

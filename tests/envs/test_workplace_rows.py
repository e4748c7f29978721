"""The workplace store's row reading: list columns decoded with orjson as ``json`` did, and a check that
reads some fields only gets the same rows with the other list columns left as stored."""

from __future__ import annotations

import math

from palaestra.envs.workplace import store


def test_list_columns_read_back_as_json_reads_them() -> None:
    assert store._list_value(None) == [] and store._list_value("") == []
    assert store._list_value('["a@x.org", "b@x.org"]') == ["a@x.org", "b@x.org"]
    nan = store._list_value("[NaN]")  # written by json.dumps, refused by orjson: json reads it
    assert len(nan) == 1 and math.isnan(nan[0])


def test_rows_decode_only_what_is_asked() -> None:
    office = store.build(store.default_fixture())
    full = store.rows(office, "events")
    assert full and all(isinstance(r["attendees"], list) for r in full)
    assert store.rows(office, "events", decode={"attendees": "x"}) == full
    raw = store.rows(office, "events", decode={"title": "x"})
    assert [r["id"] for r in raw] == [r["id"] for r in full]
    assert all(isinstance(r["attendees"], str) for r in raw)
    assert [{**r, "attendees": store._list_value(r["attendees"])} for r in raw] == full

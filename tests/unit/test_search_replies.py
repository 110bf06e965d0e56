"""The vector index's reply parsing, in both protocols."""

from __future__ import annotations

from gaama.store.index_layout import documents


def test_search_replies_parse_in_both_protocols():
    resp3 = {
        b"total_results": 1,
        b"results": [
            {
                b"id": b"p:node:{t}:ep_1",
                b"extra_attributes": {b"dist": b"0.25", b"text": b"caf\xc3\xa9"},
            }
        ],
    }
    resp2 = [1, b"p:node:{t}:ep_1", [b"dist", b"0.25", b"text", b"caf\xc3\xa9"]]
    want = [("p:node:{t}:ep_1", {"dist": "0.25", "text": "café"})]
    assert documents(resp3) == documents(resp2) == want

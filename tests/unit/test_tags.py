"""Scope digests: fixed length, exact."""

from __future__ import annotations

from gaama import ids


def test_tags_are_fixed_length_hex_and_exact() -> None:
    assert ids.tag("t1") != ids.tag("T1")
    assert ids.tag("a") != ids.tag("a,b")
    assert ids.tag("é") != ids.tag("e\u0301")
    assert len(ids.tag("x" * 200)) == 32 and set(ids.tag("a,b")) <= set("0123456789abcdef")
    assert ids.tag("") == ""

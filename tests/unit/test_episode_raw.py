"""An episode's ``raw`` field (what was said) is left out of its hash when its text holds it, and
read back from the text exactly; whenever the text would not give it back, it is stored."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gaama.episodes import episode_node
from gaama.events import TurnReceived
from gaama.model import Node, NodeKind
from gaama.store.codecs import episode_said, node_from_hash, node_mapping, said_in


def _turn(speaker: str, text: str, caption: str = "") -> TurnReceived:
    return TurnReceived(
        tenant="acme",
        conversation="c1",
        turn_id="D1:1",
        speaker=speaker,
        text=text,
        image_caption=caption,
        timestamp=datetime(2023, 5, 8, 13, 56, tzinfo=UTC),
    )


def _stored(node: Node) -> dict[bytes, bytes]:
    return {k.encode(): str(v).encode() for k, v in node_mapping(node).items()}


@pytest.mark.parametrize(
    ("speaker", "text", "caption"),
    [
        ("Caroline", "I went to a support group yesterday.", ""),
        ("Melanie", "Look: [my] bowl] Melanie: again", "a photo of a blue bowl"),
        ("Jo] Ann", "] Jo] Ann: a speaker whose name has the separator", ""),
        ("Ann", "] Ann: said twice] Ann: ", ""),
    ],
)
def test_an_ingested_episode_reads_back_as_written(speaker: str, text: str, caption: str):
    turn = _turn(speaker, text, caption)
    node = episode_node(turn)
    h = _stored(node)
    back = node_from_hash("acme", node.id, h)
    assert back.extra.get("raw", "") == turn.said()
    h_text, h_speaker = h[b"text"].decode(), h[b"speaker"].decode()
    assert episode_said(h.get(b"raw", b"").decode(), h_text, h_speaker) == turn.said()


def test_raw_is_left_out_only_when_the_text_gives_it_back():
    node = episode_node(_turn("Caroline", "I went camping."))
    assert "raw" not in node_mapping(node)
    assert said_in(node.text, "Caroline") == "I went camping."
    other = Node(
        id=node.id,
        tenant="acme",
        kind=NodeKind.EPISODE,
        text=node.text,
        speaker="Caroline",
        extra={"raw": "something else"},
    )
    assert node_mapping(other)["raw"] == "something else"
    assert node_from_hash("acme", node.id, _stored(other)).extra["raw"] == "something else"
    # a fact keeps whatever it carries; a text of another form gives nothing back
    fact = Node(id="fa_1", tenant="acme", kind=NodeKind.FACT, text="[x] A: y", extra={"raw": "y"})
    assert node_mapping(fact)["raw"] == "y"
    assert said_in("Caroline: I went camping.", "Caroline") is None
    assert episode_said("", "Caroline: hi", "Caroline") == "Caroline: hi"

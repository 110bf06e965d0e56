"""The named-person prior (:func:`gaama.retrieval.candidates.person_prior`) on constructed
candidates: who a node is said by or about, when a query names them, and when it tells nothing."""

from __future__ import annotations

from gaama import ids
from gaama.model import NodeKind
from gaama.retrieval.candidates import person_of, person_prior


def _node(kind: NodeKind, n: int) -> str:
    return ids.node_id("t1", kind, f"n{n}")


EP_ANN = _node(NodeKind.EPISODE, 1)
EP_BOB = _node(NodeKind.EPISODE, 2)
FACT_ANN = _node(NodeKind.FACT, 3)
FACT_BOB = _node(NodeKind.FACT, 4)
FACT_NONE = _node(NodeKind.FACT, 5)
REFL_ANN = _node(NodeKind.REFLECTION, 6)

SHOWN = {
    EP_ANN: {"text": "I ran a race", "speaker": "Ann", "subject": "Bob"},
    EP_BOB: {"text": "Nice!", "speaker": "Bob"},
    FACT_ANN: {"text": "Ann ran a race", "subject": "Ann", "speaker": "Bob"},
    FACT_BOB: {"text": "Bob cheered", "subject": "Bob"},
    FACT_NONE: {"text": "The race was long"},
    REFL_ANN: {"text": "Ann runs often", "subject": "Ann"},
}


def test_who_a_node_is_said_by_or_about() -> None:
    # An episode: its speaker (not its subject); a fact or reflection: its subject.
    assert person_of(NodeKind.EPISODE, SHOWN[EP_ANN]) == "Ann"
    assert person_of(NodeKind.FACT, SHOWN[FACT_ANN]) == "Ann"
    assert person_of(NodeKind.REFLECTION, SHOWN[REFL_ANN]) == "Ann"
    assert person_of(NodeKind.FACT, SHOWN[FACT_NONE]) == ""


def test_the_named_persons_nodes_gain() -> None:
    prior = person_prior("What race did Ann run?", SHOWN, SHOWN, 0.1)
    assert prior == {EP_ANN: 0.1, FACT_ANN: 0.1, REFL_ANN: 0.1}


def test_a_possessive_and_case_still_name_the_person() -> None:
    assert set(person_prior("where is ANN\u2019s race?", SHOWN, SHOWN, 0.1)) == {
        EP_ANN,
        FACT_ANN,
        REFL_ANN,
    }


def test_a_name_inside_another_word_names_nobody() -> None:
    assert person_prior("What did Annabel plan?", SHOWN, SHOWN, 0.1) == {}
    assert person_prior("What's the plan of Ann's?", SHOWN, SHOWN, 0.1) != {}
    assert person_prior("Is this Bob's?", SHOWN, SHOWN, 0.1) == {EP_BOB: 0.1, FACT_BOB: 0.1}


def test_naming_nobody_or_everybody_tells_nothing() -> None:
    assert person_prior("Who ran a race?", SHOWN, SHOWN, 0.1) == {}
    assert person_prior("Did Ann and Bob run together?", SHOWN, SHOWN, 0.1) == {}


def test_every_word_of_a_longer_name_must_be_named() -> None:
    shown = {
        FACT_ANN: {"subject": "Ann Lee"},
        FACT_BOB: {"subject": "Bob"},
    }
    assert person_prior("What did Ann do?", shown, shown, 0.2) == {}
    assert person_prior("What did Ann Lee do?", shown, shown, 0.2) == {FACT_ANN: 0.2}


def test_only_the_candidates_given_are_weighed() -> None:
    assert person_prior("What did Ann run?", [EP_ANN, EP_BOB], SHOWN, 0.3) == {EP_ANN: 0.3}

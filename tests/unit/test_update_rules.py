"""The offline update rules (gaama.extract.updates): which current facts a new fact ends, and
why; retraction requests; and that anything unsure stays current.

The sentences here are written for these tests, apart from the benchmark's templates."""

from __future__ import annotations

import pytest

from gaama.extract.updates import (
    CurrentFact,
    NewFact,
    Retraction,
    ends,
    read_claim,
    retracted,
    retraction_request,
)

WHO = "Harriet"


def ended(old: str, new: str, subject: str = WHO) -> list[tuple[str, str]]:
    """(fact id, reason) of each fact ``new`` ends among the one older fact ``old``."""
    out = ends(NewFact(new, subject, time=200.0), [CurrentFact("f-old", old, time=100.0)])
    return [(e.fact_id, e.reason) for e in out]


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        # residence
        ("Harriet lives in Dundee (said on 3 March 2024).", "Harriet moved to Galway.", "update"),
        ("Harriet is based in Dundee.", "Harriet relocated to Vilnius last spring.", "update"),
        ("Harriet lives in Dundee.", "Harriet and others moved over to Seville.", "update"),
        # employer
        ("Harriet works at Brightwell.", "Harriet joined Northwind in June.", "update"),
        ("Harriet works for Brightwell.", "Harriet got a new job at Northwind.", "update"),
        ("Harriet works at Brightwell.", "Harriet left Brightwell.", "negation"),
        # role
        ("Harriet works as a sous chef.", "Harriet was promoted to kitchen manager.", "update"),
        ("Harriet works as a translator.", "Harriet's job title is now editor.", "update"),
        # relationship
        ("Harriet is dating Ansel.", "Harriet is engaged to Corwin.", "update"),
        ("Harriet is seeing Ansel.", "Harriet split up with Ansel.", "negation"),
        ("Harriet is dating Ansel.", "Harriet is single now.", "negation"),
        # pets: names and counts
        ("Harriet's cat is named Sprout.", "Harriet's cat is called Fennel.", "update"),
        ("Harriet has a hamster named Pip.", "Harriet got a new hamster named Nib.", "update"),
        ("Harriet has a hamster named Pip.", "Pip died on Sunday.", "negation"),
        ("Harriet has 2 goats.", "Harriet has four goats now.", "update"),
        # possessions
        ("Harriet drives a Peugeot.", "Harriet's new car is a Mazda.", "update"),
        ("Harriet's bike is a Brompton.", "Harriet sold the Brompton.", "negation"),
        # favourites
        ("Harriet's favourite colour is teal.", "Harriet's favourite colour is now amber.", "update"),  # noqa: E501
        ("Harriet's favorite sport is rugby.", "Cricket is Harriet's favorite sport.", "update"),
        # contact details and corrections
        ("Harriet's phone number is 0161 555 0101.", "Harriet's new number is 0161 555 0199.", "update"),  # noqa: E501
        ("Harriet's number is 0161 555 0101.", "Actually, Harriet's number is 0161 555 0177.", "correction"),  # noqa: E501
        ("Harriet's email is h.v@oldmail.test.", "Harriet's email is now hv@newmail.test.", "update"),  # noqa: E501
        pytest.param(
            "Harriet's e-mail is h.v@oldmail.test.", "Sorry, Harriet's e-mail is hv@right.test.", "correction",  # noqa: E501
            marks=pytest.mark.xfail(strict=True, reason="a rule gap: the rules do not cover this phrasing yet"),  # noqa: E501
        ),
        # no longer / stopped / quit / cancelled / not anymore / contradiction
        ("Harriet plays the cello in an orchestra.", "Harriet no longer plays the cello.", "negation"),  # noqa: E501
        ("Harriet bakes sourdough every weekend.", "Harriet stopped baking sourdough.", "negation"),
        pytest.param(
            "Harriet smokes after dinner.", "Harriet quit smoking in January.", "negation",
            marks=pytest.mark.xfail(strict=True, reason="a rule gap: the rules do not cover this phrasing yet"),  # noqa: E501
        ),
        ("Harriet eats meat.", "Harriet doesn't eat meat anymore.", "negation"),
        ("Harriet is a member of the rowing club.", "Harriet isn't a member of the rowing club any more.", "negation"),  # noqa: E501
        ("Harriet booked a cruise to Madeira.", "Harriet cancelled the cruise to Madeira.", "cancelled"),  # noqa: E501
        ("Harriet is organising a reunion dinner.", "The reunion dinner was called off.", "cancelled"),  # noqa: E501
        ("Harriet lives in Dundee.", "Harriet does not live in Dundee.", "contradiction"),
    ],
)  # fmt: skip
def test_each_kind_ends_the_old_fact(old: str, new: str, reason: str) -> None:
    assert ended(old, new) == [("f-old", reason)]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # hedged, planned, conditional, asked
        ("Harriet lives in Dundee.", "Harriet might move to Galway next year."),
        ("Harriet lives in Dundee.", "Harriet is thinking about moving to Galway."),
        ("Harriet works at Brightwell.", "Harriet wants to work at Northwind."),
        ("Harriet works at Brightwell.", "If Harriet joined Northwind she would earn more."),
        ("Harriet lives in Dundee.", "Does Harriet live in Galway now?"),
        # about someone else
        ("Harriet lives in Dundee.", "Harriet's brother moved to Galway."),
        ("Harriet works at Brightwell.", "Colm works at Northwind."),
        ("Harriet has a hamster named Pip.", "Colm's hamster Pip died."),
        # a second pet is not a replacement
        ("Harriet has a hamster named Pip.", "Harriet adopted another hamster named Nib."),
        # the same value restated, an unrelated fact, a different attribute
        ("Harriet lives in Dundee.", "Harriet has lived in Dundee for years."),
        ("Harriet lives in Dundee.", "Harriet loves Galway."),
        ("Harriet lives in Dundee.", "Harriet works at Northwind."),
        ("Harriet's favourite colour is teal.", "Harriet's favourite film is Brazil."),
        # a stop that names something else
        ("Harriet plays the cello.", "Harriet stopped drinking coffee."),
        # a negation in a later clause does not deny the claim
        ("Harriet drives a Peugeot.", "Harriet's car is a Mazda, it never breaks down."),
    ],
)
def test_unsure_or_unrelated_stays_current(old: str, new: str) -> None:
    if new == "Harriet's car is a Mazda, it never breaks down.":
        # It is an update (a new car), not a contradiction: the negation is about breakdowns.
        assert ended(old, new) == [("f-old", "update")]
        return
    assert ended(old, new) == []


def test_first_person_sentences_are_read_too() -> None:
    assert ended("I live in Dundee.", "I moved to Galway.") == [("f-old", "update")]
    assert ended("I'm dating Ansel.", "I broke up with Ansel.") == [("f-old", "negation")]


def test_a_later_fact_is_never_ended_by_an_earlier_one() -> None:
    new = NewFact("Harriet moved to Galway.", WHO, time=100.0)
    later = CurrentFact("f-later", "Harriet lives in Dundee.", time=300.0)
    assert ends(new, [later]) == []
    same_time = CurrentFact("f-tie", "Harriet lives in Dundee.", time=100.0)
    assert [e.fact_id for e in ends(new, [same_time])] == ["f-tie"]


def test_only_the_facts_of_the_changed_attribute_end() -> None:
    current = [
        CurrentFact("home", "Harriet lives in Dundee.", 1.0),
        CurrentFact("job", "Harriet works at Brightwell.", 2.0),
        CurrentFact("pet", "Harriet has a hamster named Pip.", 3.0),
        CurrentFact("again", "Harriet moved to Dundee in 2019.", 4.0),
    ]
    out = ends(NewFact("Harriet has moved to Galway.", WHO, 10.0), current)
    assert {(e.fact_id, e.reason, e.attribute) for e in out} == {
        ("home", "update", "residence"),
        ("again", "update", "residence"),
    }


def test_claims_name_attribute_and_value() -> None:
    claim = read_claim("Harriet's favourite colour is now amber (said on 2 May 2024).", (WHO,))
    assert claim is not None
    assert (claim.attribute, claim.value, claim.stopped) == ("favourite:colour", "amber", None)
    assert read_claim("Harriet might move to Galway.", (WHO,)) is None


@pytest.mark.parametrize(
    ("text", "target", "redact"),
    [
        ("Please forget my passport number.", "my passport number", True),
        ("Could you delete what I told you about my knee operation?", "my knee operation", True),
        ("Forget what I said about my last job, thanks.", "my last job", True),
        ("Oh, and erase my home address from your memory.", "my home address", True),
        ("I'd like you to remove everything about my divorce.", "my divorce", True),
        ("Don't remember my sister's phone number, please.", "my sister's phone number", True),
        ("That's not true any more.", "", False),
        ("Actually that isn't true anymore.", "", False),
    ],
)
def test_retraction_requests_are_recognised(text: str, target: str, redact: bool) -> None:
    assert retraction_request(text) == Retraction(target, redact)


@pytest.mark.parametrize(
    "text",
    [
        "I always forget my keys.",
        "Harriet forgot her umbrella on the bus.",
        "We deleted the old photos from the laptop.",
        "Don't forget to buy milk!",  # a reminder to a person, nothing about the memory
        pytest.param(
            "That's true, the museum is closed on Mondays.",
            marks=pytest.mark.xfail(
                strict=True, reason="a rule gap: the rules do not cover this phrasing yet"
            ),
        ),
        "I removed the wallpaper in the hall.",
    ],
)
def test_ordinary_turns_are_not_retractions(text: str) -> None:
    assert retraction_request(text) is None


def test_retraction_ends_what_it_names_and_nothing_else() -> None:
    current = [
        CurrentFact("passport", "Harriet's passport number is X4410982.", 1.0),
        CurrentFact("home", "Harriet lives in Dundee.", 2.0),
        CurrentFact("op", "Harriet had a knee operation in May.", 3.0),
        CurrentFact("job", "Harriet works at Brightwell.", 4.0),
        CurrentFact("after", "Harriet's passport number is Y0000001.", 50.0),
    ]
    by_words = retraction_request("Please forget my passport number.")
    assert by_words is not None
    assert [e.fact_id for e in retracted(by_words, WHO, current, 10.0)] == ["passport"]
    about_job = retraction_request("Delete what I told you about my job.")
    assert about_job is not None
    assert [e.fact_id for e in retracted(about_job, WHO, current, 10.0)] == ["job"]
    surgery = retraction_request("Can you forget my knee operation?")
    assert surgery is not None
    out = retracted(surgery, WHO, current, 10.0)
    assert [(e.fact_id, e.reason) for e in out] == [("op", "retracted")]


def test_not_true_any_more_ends_the_previous_statement() -> None:
    current = [
        CurrentFact("old", "Harriet lives in Dundee.", 1.0),
        CurrentFact("last", "Harriet is vegan.", 5.0),
        CurrentFact("same-turn", "Harriet eats fish now.", 9.0),
    ]
    request = retraction_request("That's not true any more.")
    assert request is not None and not request.redact
    assert [e.fact_id for e in retracted(request, WHO, current, 9.0)] == ["last"]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Omar's phone number is 07472 106334.", "Omar got a new number: 07509 731977."),
        ("Omar's phone number is 07940 210841.", "Omar's number changed, it's 07143 126544 now."),
        ("Omar's job at Umbrella Logistics keeps Omar busy.", "Omar joined Tyrell Systems."),
    ],
)
def test_new_number_and_job_phrasings_end_the_old_value(old: str, new: str) -> None:
    found = ends(NewFact(new, "Omar", 2.0), [CurrentFact("old", old, 1.0)])
    assert [e.reason for e in found] == ["update"]


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        # a later clause with its own holder
        ("Harriet has 2 goats.", "Harriet took in a stray, so Harriet has 3 goats now.", "update"),
        ("Harriet works as a baker.", "Harriet retrained and Harriet is a welder now.", "update"),
        # an opening phrase before the holder
        ("Harriet has 2 goats.", "After the market Harriet is up to 4 goats.", "update"),
        # no holder named: the fact's subject says it of themself
        ("Harriet lives in Dundee.", "Galway is home now.", "update"),
        ("Life in Dundee suits Harriet.", "Harriet moved to Galway.", "update"),
        ("Work at Brightwell is slow.", "Harriet joined Northwind.", "update"),
        ("Harriet's number is 0161 555 0101.", "Please use 0161 555 0133 from now on.", "update"),
        ("Harriet's number is 0161 555 0101.", "It's 0161 555 0144.", "update"),
        ("Write to Harriet at h@old.test.", "Send mail to h@new.test.", "update"),
        # the holder's possessive inside the sentence, appositive and replaced favourites
        ("Harriet works at Brightwell.", "Day one at Harriet's new job at Northwind.", "update"),
        (
            "Nothing tops cobbler, Harriet's favourite dessert.",
            "Flan is Harriet's favourite dessert.",
            "update",
        ),
        (
            "Harriet's favourite dessert is cobbler.",
            "Flan has replaced cobbler as Harriet's favourite dessert.",
            "update",
        ),
        ("Harriet is dating Ansel.", "Harriet has been going out with Corwin.", "update"),
        ("Harriet has a hamster named Pip.", "Sadly Pip died in May.", "negation"),
    ],
)
def test_more_phrasings_end_the_old_value(old: str, new: str, reason: str) -> None:
    assert ended(old, new) == [("f-old", reason)]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Harriet lives in Dundee.", "Call Ansel on 0161 555 0101."),  # someone else's number
        ("Harriet's number is 0161 555 0101.", "Call Ansel on 0161 555 0199."),
        ("Harriet lives in Dundee.", "Harriet's cousin Hattie lives in Galway, by the way."),
        ("Harriet has 2 goats.", "Harriet might have 3 goats, so Harriet says."),
        ("Harriet works at Brightwell.", "Ansel's new job at Northwind is going well."),
        ("Send mail to h@old.test.", "Harriet sent mail to ansel@new.test."),
    ],
)
def test_other_holders_and_hedges_stay_current(old: str, new: str) -> None:
    assert ended(old, new) == []


def test_a_negation_in_a_later_clause_does_not_turn_the_claim_into_a_stop() -> None:
    new = "Send mail to hv.2@new.test, Harriet doesn't check hv.1@oldmail.test any more."
    claim = read_claim(new, [WHO])
    assert claim is not None and claim.attribute == "email" and claim.stopped is None
    # and the later clause still ends what it names
    assert ended("Write to Harriet at hv.1@oldmail.test.", new) == [("f-old", "update")]
    old = "Harriet reads hv.1@oldmail.test daily."  # no attribute read: the stop ends it
    assert ended(old, new) == [("f-old", "negation")]


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("Forget my passport number.", "my passport number"),
        ("Delete what I told you about my surgery.", "my surgery"),
        ("Forget what I said about my old job.", "my old job"),
        ("I'd rather you didn't keep my bank PIN, wipe it please.", "my bank PIN"),
        ("Remove my home address from your memory, please.", "my home address"),
    ],
)
def test_requests_to_forget_redact(text: str, target: str) -> None:
    assert retraction_request(text) == Retraction(target, redact=True)


@pytest.mark.parametrize(
    "text",
    [
        "Don't forget my appointment on Friday.",
        "Please don't forget my birthday.",
        "I'd rather you did keep my number.",
        "I keep forgetting my password.",
        "Can you remember my passport number?",
    ],
)
def test_requests_that_are_not_retractions(text: str) -> None:
    assert retraction_request(text) is None


def test_not_true_any_more_names_what_the_turn_said_before_it() -> None:
    request = retraction_request("Remember my pollen allergy? That's not true any more.")
    assert request == Retraction("my pollen allergy", redact=False)
    current = [
        CurrentFact("allergy", "Harriet can't eat pollen, Harriet is allergic.", 1.0),
        CurrentFact("later", "Harriet works at Brightwell.", 5.0),
    ]
    assert [e.fact_id for e in retracted(request, WHO, current, 9.0)] == ["allergy"]


def test_a_request_names_a_kind_of_thing_by_its_word_parts() -> None:
    current = [
        CurrentFact("op", "Harriet had a tonsillectomy in spring.", 1.0),
        CurrentFact("repair", "Harriet had a hernia repair in May.", 2.0),
        CurrentFact("pin", "Harriet's bank PIN is 4471.", 3.0),
        CurrentFact("said", "Harriet said the train was late.", 4.0),  # "said" holds no "id"
        CurrentFact("fence", "Harriet repainted the garden fence.", 5.0),
    ]
    surgery = retraction_request("Please forget my surgery.")
    assert surgery is not None
    assert [e.fact_id for e in retracted(surgery, WHO, current, 9.0)] == ["op", "repair"]
    passport = retraction_request("Delete my passport number.")
    assert passport is not None
    assert retracted(passport, WHO, current, 9.0) == []

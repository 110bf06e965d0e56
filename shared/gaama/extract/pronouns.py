"""First and second person → names, for facts that stand on their own ("I love my kids" said
by Melanie to Caroline → "Melanie loves Melanie's kids").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from gaama.extract.concepts import is_base_form
from gaama.extract.vocabulary import words_of

_ADVERBS = words_of(
    "really also just still always never often usually actually totally definitely even "
    "sometimes recently finally truly absolutely kinda now only already certainly honestly "
    "seriously literally mostly rarely currently"
)
_KEEP_FORM = words_of(
    "can could will would shall should may might must did was were had got gotta gonna wanna "
    "kinda used felt went made took saw found thought bought came gave met ran began put left "
    "kept told said knew won wrote drew sang swam ate drank built brought taught caught heard lost "
    "paid sold sent spent became chose fell flew held hurt let meant rode sat slept spoke stood "
    "threw understood woke wore grew hit cut set read two both all too also as so the a an"
)
_IRREGULAR = {
    "am": "is",
    "are": "is",
    "have": "has",
    "do": "does",
    "go": "goes",
    "were": "was",
    "don't": "doesn't",
    "aren't": "isn't",
    "haven't": "hasn't",
    "weren't": "wasn't",
}
# Where "you" starts a clause, so the word after it is its verb ("... so you know").
_CLAUSE_START = (
    r"(?P<pre>^\s*|[,;:.!?-]\s+|\b(?:and|but|so|if|when|because|that|as|since|while|where|how"
    r"|what|hope|think|know|bet|guess)\s+)"
)
_ADVERB_RUN = r"(?P<adv>(?:(?:" + "|".join(sorted(_ADVERBS)) + r")\s+)*)"
_VERB = r"(?P<verb>[A-Za-z][A-Za-z']*)"


def _third_person(verb: str) -> str:
    """Inflect a base-form verb for a third-person subject ("love" -> "loves")."""
    lower = verb.lower()
    if lower in _IRREGULAR:
        return _IRREGULAR[lower]
    if (
        not verb.isalpha()
        or not verb.islower()
        or lower in _KEEP_FORM
        or lower.endswith(("ed", "ing", "s"))
        or not is_base_form(lower)
    ):
        return verb
    if lower.endswith(("sh", "ch", "x", "z", "o")):
        return verb + "es"
    if lower.endswith("y") and lower[-2:-1] not in ("a", "e", "i", "o", "u"):
        return verb[:-1] + "ies"
    return verb + "s"


@dataclass(frozen=True, slots=True)
class Rewritten:
    """A sentence in the third person, and whom it is mainly about (empty: the speaker)."""

    text: str
    subject: str


def _as_subject(name: str) -> Callable[[re.Match[str]], str]:
    def repl(match: re.Match[str]) -> str:
        pre = match.groupdict().get("pre") or ""
        return f"{pre}{name} {match.group('adv')}{_third_person(match.group('verb'))}"

    return repl


def _rewrite_person(text: str, name: str, pronoun: str, clause_only: bool) -> str:
    """Replace one pronoun family ("I" or "you") by ``name``, fixing the verb after it."""
    contractions = (("m", "is"), ("re", "is"), ("ve", "has"), ("d", "would"), ("ll", "will"))
    for suffix, verb in contractions:
        text = re.sub(rf"\b{pronoun}'{suffix}\b", f"{name} {verb}", text)
    # A subject pronoun is followed by its verb; "you" only counts as a subject where a clause
    # starts, since "I told you about it" must not become "... Caroline abouts it".
    head = _CLAUSE_START if clause_only else r""
    subject_rule = re.compile(rf"{head}\b{pronoun}\b(?!['-])\s+{_ADVERB_RUN}{_VERB}")
    text = subject_rule.sub(_as_subject(name), text)
    return re.sub(rf"\b{pronoun}\b(?!['-])", name, text)


def rewrite_pronouns(text: str, speaker: str, other: str | None) -> Rewritten:
    """Replace first-person (and, with a known addressee, second-person) pronouns by names.

    Args:
        text: A sentence said by ``speaker``.
        speaker: Who said it.
        other: The addressee when the conversation has exactly two speakers, else None
            (then "you" is left alone).

    Returns:
        The rewritten sentence ("I love my kids" by Melanie -> "Melanie loves Melanie's kids")
        and its subject: ``other`` when the sentence starts with "you"/"your", else empty.
    """
    starts_with_you = re.match(r"\s*(?:you|your)\b", text, re.IGNORECASE)
    subject = other if (other and starts_with_you) else ""
    if other:
        text = re.sub(
            r"\b(?:[Yy]ou guys|[Yy]ou all|[Yy]ou two|[Yy]ou both|[Yy]'all)\b",
            f"{other} and others",
            text,
        )
        text = re.sub(r"\b[Yy]our(?:s|self)?\b(?!-)", lambda m: _owner(m, other), text)
        text = _rewrite_person(text, other, "[Yy]ou", clause_only=True)
    text = re.sub(r"\b(?:[Mm]y|[Mm]ine|[Mm]yself)\b(?!-)", lambda m: _owner(m, speaker), text)
    text = re.sub(r"\b[Mm]e\b(?![-'])", speaker, text)
    text = _rewrite_person(text, speaker, "I", clause_only=False)
    group = f"{speaker} and others"
    for contraction, verb in (("re", "are"), ("ve", "have"), ("d", "would"), ("ll", "will")):
        text = re.sub(rf"\b[Ww]e'{contraction}\b", f"{group} {verb}", text)
    text = re.sub(r"\b(?:[Ww]e|us)\b(?![-'])", group, text)
    text = re.sub(r"\b(?:[Oo]ur|[Oo]urs)\b(?!-)", f"{speaker}'s", text)
    text = re.sub(r"\b[Oo]urselves\b", "themselves", text)
    return Rewritten(text=text, subject=subject)


def _owner(match: re.Match[str], name: str) -> str:
    # "myself"/"yourself" name the person; "my", "mine", "your", "yours" their possession.
    return name if match.group(0).lower().endswith("self") else f"{name}'s"

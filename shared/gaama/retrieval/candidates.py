"""The candidates of one search: full-text matches joining the KNN pool, the read-ahead of
expanded nodes, the walk, the time prior, and a candidate's stored fields shown on its item
(the steps are described in :mod:`gaama.retrieval.search`'s docstring)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from gaama.config import RetrievalSettings
from gaama.model import NodeKind
from gaama.retrieval.pack import Item, Provenance
from gaama.retrieval.ppr import PPRResult, csr_arrays, personalized_pagerank
from gaama.retrieval.scoring import cosine, node_kind
from gaama.retrieval.timeq import Period, in_periods
from gaama.store.subgraph import Expansion
from gaama.store.validity import validity_of
from gaama.store.vectors import LexicalHit


def ppr_size(sub: Expansion) -> int:
    """The walk's size: subgraph nodes plus stored (directed) adjacency entries."""
    return len(sub.nodes) + 2 * len(sub.edges)


def run_ppr(sub: Expansion, restart: np.ndarray, p: RetrievalSettings) -> PPRResult:
    return personalized_pagerank(
        csr_arrays(len(sub.nodes), sub.edges, unique=True),
        restart,
        alpha=p.alpha,
        max_iter=p.max_iter,
        tol=p.tol,
        degrees=sub.degrees,
        hub_degree=p.hub_degree,
        hub_dampening=p.hub_dampening,
    )


def time_prior(
    periods: list[Period],
    candidates: Iterable[str],
    shown: Mapping[str, Mapping[str, str]],
    w_time: float,
) -> dict[str, float]:
    """``w_time`` for each candidate whose time, or a date its text names, is in ``periods``."""
    out = {}
    for node in candidates:
        fields = shown.get(node, {})
        t = fields.get("time")
        if in_periods(periods, float(t) if t else None, fields.get("text", "")):
            out[node] = w_time
    return out


# The words of a name or a query: lower case, a possessive "'s" dropped ("Caroline's" is
# "caroline"), split at anything but letters and digits.
_NAME_WORD = re.compile(r"[^\W_]+")
_POSSESSIVE = re.compile(r"['\u2019]s\b")


def _name_words(text: str) -> frozenset[str]:
    return frozenset(_NAME_WORD.findall(_POSSESSIVE.sub("", text.lower())))


def person_of(kind: NodeKind | None, fields: Mapping[str, str]) -> str:
    """Who a candidate is said by or about: an episode's speaker, a fact's or reflection's
    subject ("" when the node records none)."""
    return fields.get("speaker", "") if kind is NodeKind.EPISODE else fields.get("subject", "")


def person_prior(
    query: str,
    candidates: Iterable[str],
    shown: Mapping[str, Mapping[str, str]],
    w_person: float,
) -> dict[str, float]:
    """``w_person`` for each candidate said by or about a person the query names
    (:func:`person_of`; a person is named when every word of their name is a word of the
    query). Nothing when the query names none of the candidates' people, or all of them: then
    the names do not tell the candidates apart."""
    words = _name_words(query)
    of: dict[str, str] = {}
    named: dict[str, bool] = {}
    for node in candidates:
        person = person_of(node_kind(node), shown.get(node, {}))
        if person:
            of[node] = person
            if person not in named:
                name = _name_words(person)
                named[person] = bool(name) and name <= words
    if not any(named.values()) or all(named.values()):
        return {}
    return {node: w_person for node, person in of.items() if named[person]}


def join_matches(
    sims: dict[str, float],
    shown: dict[str, dict[str, str]],
    matches: Sequence[LexicalHit],
    qvec: np.ndarray,
) -> None:
    """Full-text matches outside the KNN pool join the candidates, with the cosine similarity of
    their stored vector (0 without one: only their text match speaks for them)."""
    new = [m for m in matches if m.id not in sims]
    with_vector = [m for m in new if m.vector is not None]
    if with_vector:
        vectors = np.stack([m.vector for m in with_vector if m.vector is not None])
        for m, similarity in zip(with_vector, cosine(vectors, qvec).tolist(), strict=True):
            sims[m.id] = similarity
    for m in new:
        sims.setdefault(m.id, 0.0)
        shown[m.id] = m.fields


# The day a fact was said, as the offline extractor appends it: "(said on 8 May 2023)".
_SAID_ON = re.compile(r"\(said on (\d{1,2} [A-Z][a-z]+ \d{4})\)")


def compact(kind: NodeKind, text: str) -> str:
    """The text an item shows: a fact's "(said on D)" as "(said D)". The stored text (what
    is embedded and indexed) is left as extracted; the memory spends one word less on each
    fact that carries the day it was said, and says the same."""
    return _SAID_ON.sub(r"(said \1)", text) if kind is NodeKind.FACT else text


def show(item: Item, fields: Mapping[str, str], compact_text: bool = True) -> None:
    """Copy a node's stored text, time and place onto its item (a node deleted since the KNN
    read has no fields: its empty text drops it); with ``compact_text`` the text is
    :func:`compact`'s."""
    get = fields.get
    item.text = get("text", "")
    if compact_text:
        item.text = compact(item.kind, item.text)
    if time_ := get("time"):
        item.time = float(time_)
    item.conversation = get("conversation", "")
    if seq := get("seq"):
        item.seq = int(seq)
    if item.kind is NodeKind.EPISODE:
        item.speaker = get("speaker", "")
        if (turn := get("turn_id")) is not None:
            item.provenance = [Provenance(item.id, turn)]
    elif item.kind is NodeKind.FACT and (sources := get("sources")):
        item.sources = tuple(e for e in sources.split(",") if e)
    if get("valid_to") or get("valid_from"):
        item.validity = validity_of(fields)

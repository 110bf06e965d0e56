"""Sentences of a turn for the offline extractor: pysbd's segmentation, then the splits it
misses (a lower-case word ending a sentence before a capital, clauses joined by a semicolon or a
spaced dash), with a bracketed note ("[shares a photo of a bowl]") as a sentence of its own."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

__all__ = ["split_sentences"]

# Clauses joined by a semicolon are two statements: one fact each.
_CLAUSE_SPLIT = re.compile(r"\s*;\s+")
_BRACKETED = re.compile(r"\s*\[([^\]]*)\]")
_EXTRA_SPLIT = re.compile(r"(?<=[a-z]{2}[.!?])\s+(?=[A-Z])")
# A spaced dash between words joins two clauses ("you won't believe it - I got the job"): each
# is a sentence, so each becomes a fact of its own. Hyphens ("well-known") and ranges between
# numbers ("5 - 6 hours") are not clause breaks.
_DASH_SPLIT = re.compile(r"(?<=[^\W\d_]|[,.!?'\"])\s+[-–—]+\s+(?=[^\W\d_])")


@lru_cache(maxsize=1)
def _segmenter() -> Any:
    # pysbd builds its rule tables on construction: one instance per process.
    import pysbd
    from pysbd.utils import TextSpan

    class Segmenter(pysbd.Segmenter):  # type: ignore[misc]
        def sentences_with_char_spans(self, sentences: list[str]) -> list[Any]:
            return [TextSpan(*span) for span in _spans(self.original_text, sentences)]

    return Segmenter(language="en", clean=False)


def _spans(text: str, sentences: Sequence[str]) -> list[tuple[str, int, int]]:
    """Where pysbd's sentences lie in ``text``, each with the whitespace after it, as pysbd
    finds them (each one's first occurrence ending after the previous one's end), without the
    regular expression pysbd compiles for every sentence: those fill Python's pattern cache
    and evict the patterns the rest of the extractor uses."""
    out: list[tuple[str, int, int]] = []
    prior_end = 0
    for sentence in sentences:
        if not sentence:
            continue  # an empty pattern would match anywhere; pysbd yields none
        start = 0
        while (at := text.find(sentence, start)) >= 0:
            end = at + len(sentence)
            while end < len(text) and text[end].isspace():
                end += 1
            if end > prior_end:
                out.append((text[at:end], at, end))
                prior_end = end
                break
            start = end  # the next match starts after this one, as re.finditer's would
    return out


def split_sentences(text: str) -> list[str]:
    # A bracketed note such as "[shares a photo of a bowl]" becomes a sentence of its own.
    text = _BRACKETED.sub(lambda m: ". " + m.group(1).strip() + ". ", text.replace("’", "'"))
    sentences: list[str] = []
    for part in _segmenter().segment(text):
        # pysbd sometimes keeps "... to me. I ran ..." together; split again where a lower-case
        # word ends a sentence and a capital starts the next (abbreviations end otherwise).
        for piece in _EXTRA_SPLIT.split(part):
            for n, clause in enumerate(_CLAUSE_SPLIT.split(piece)):
                # A clause after a semicolon has its subject ("...; my kids hiked"): capitalised,
                # it is not taken for a subject-less note such as "shares a photo of ...".
                clause = clause[:1].upper() + clause[1:] if n else clause
                sentences.extend(c.strip() for c in _DASH_SPLIT.split(clause) if c.strip(" .,-–—"))
    return sentences

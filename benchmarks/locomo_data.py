"""Loading LoCoMo (``locomo10.json`` format) as conversation input and questions.

Only the conversation itself and the questions are read: ``sample_id``, ``qa`` and, inside
``conversation``, ``speaker_a``/``speaker_b``, ``session_N`` and ``session_N_date_time``. The
dataset's ``observation``, ``session_summary`` and ``event_summary`` are annotations the dataset
authors generated with an LLM; a memory system must not see them, so this module never looks them
up — every value is fetched by an explicit key, never by iterating a sample's items
(``tests/integration/test_locomo_harness.py`` proves it with values that raise when touched).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gaama.errors import ValidationError
from gaama.events import TurnReceived

#: Categories the GAAMA paper evaluates (5, adversarial, is left out).
CATEGORIES = (1, 2, 3, 4)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y")


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn as the conversation holds it (its time comes from its session)."""

    turn_id: str  # dia_id, e.g. "D1:3"
    speaker: str
    text: str
    image_caption: str = ""


@dataclass(frozen=True, slots=True)
class Session:
    number: int
    started: datetime  # aware, UTC
    turns: tuple[Turn, ...]


@dataclass(frozen=True, slots=True)
class Question:
    question: str
    answer: str
    evidence: tuple[str, ...]  # raw entries, possibly "D8:6; D9:17"
    category: int


@dataclass(frozen=True, slots=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...] = field(default=())

    @property
    def turn_ids(self) -> frozenset[str]:
        return frozenset(t.turn_id for s in self.sessions for t in s.turns)

    @property
    def n_turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    def turn_events(
        self, tenant: str, step: timedelta = timedelta(seconds=1)
    ) -> list[TurnReceived]:
        """The turns as producers would send them, in conversation order.

        Turn ``i`` of a session is stamped ``session start + i·step``: the session's time is all
        the dataset gives, and distinct times keep the turns in order wherever they are sorted by
        time. With seconds the rendered ``[1:56 PM on 8 May, 2023]`` prefix stays the session's.
        The last turn of each session carries ``end_of_session`` so extraction chunks close
        there, as a live producer would signal.
        """
        out: list[TurnReceived] = []
        for session in self.sessions:
            last = len(session.turns) - 1
            for i, turn in enumerate(session.turns):
                out.append(
                    TurnReceived(
                        tenant=tenant,
                        conversation=self.sample_id,
                        turn_id=turn.turn_id,
                        speaker=turn.speaker,
                        text=turn.text,
                        image_caption=turn.image_caption,
                        timestamp=session.started + i * step,
                        end_of_session=i == last,
                    )
                )
        return out


def parse_session_time(value: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` → an aware UTC datetime (LoCoMo gives no time zone).

    Raises:
        ValidationError: the text is in none of the known formats.
    """
    text = " ".join(value.split())
    for fmt in _DATE_FORMATS:
        try:  # strptime matches "pm"/"PM" and month names case-insensitively
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    import dateparser

    parsed: datetime | None = dateparser.parse(
        value, settings={"TIMEZONE": "UTC", "RETURN_AS_TIMEZONE_AWARE": True}
    )
    if parsed is None:
        raise ValidationError(f"unrecognised session date-time {value!r}")
    return parsed.astimezone(UTC)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value) if value is not None else ""


def _sessions(conv: Mapping[str, Any]) -> tuple[Session, ...]:
    # Iterating the keys of ``conversation`` touches no value; only session_N keys are opened.
    numbers = sorted(
        int(m.group(1))
        for k in list(conv.keys())
        if isinstance(k, str) and (m := _SESSION_KEY.match(k))
    )
    out = []
    for n in numbers:
        raw_turns = conv[f"session_{n}"]
        if not raw_turns:
            continue  # LoCoMo lists some empty trailing sessions
        started = parse_session_time(str(conv[f"session_{n}_date_time"]))
        turns = tuple(
            Turn(
                turn_id=str(t["dia_id"]).strip(),
                speaker=str(t["speaker"]),
                text=str(t["text"]),
                image_caption=str(t.get("blip_caption") or ""),
            )
            for t in raw_turns
            if str(t.get("text") or "").strip() or t.get("blip_caption")
        )
        out.append(Session(n, started, turns))
    return tuple(out)


def _questions(qa: Sequence[Mapping[str, Any]]) -> tuple[Question, ...]:
    out = []
    for q in qa:
        category = int(q["category"])
        # Category 5 items carry "adversarial_answer" instead of "answer".
        answer = _str(q["answer"]) if "answer" in q else ""
        out.append(
            Question(
                question=str(q["question"]),
                answer=answer,
                evidence=tuple(str(e) for e in (q.get("evidence") or ())),
                category=category,
            )
        )
    return tuple(out)


def parse_samples(
    samples: Sequence[Mapping[str, Any]], only: Sequence[str] | None = None
) -> list[Conversation]:
    """Conversations from already-decoded LoCoMo samples, in file order.

    Args:
        samples: The decoded JSON list.
        only: Sample ids to keep (all when None); an unknown id is an error.

    Raises:
        ValidationError: an id in ``only`` is missing, or a sample is malformed.
    """
    wanted = list(dict.fromkeys(only)) if only else None
    out: list[Conversation] = []
    for sample in samples:
        sample_id = str(sample["sample_id"])
        if wanted is not None and sample_id not in wanted:
            continue
        conv = sample["conversation"]
        try:
            out.append(
                Conversation(
                    sample_id=sample_id,
                    speakers=(str(conv["speaker_a"]), str(conv["speaker_b"])),
                    sessions=_sessions(conv),
                    questions=_questions(sample["qa"]),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValidationError(f"sample {sample_id}: malformed ({exc!r})") from None
    if wanted is not None:
        missing = sorted(set(wanted) - {c.sample_id for c in out})
        if missing:
            raise ValidationError(f"conversations not in the data: {', '.join(missing)}")
    return out


def load_locomo(path: str | Path, only: Sequence[str] | None = None) -> list[Conversation]:
    """Read a LoCoMo JSON file (see :func:`parse_samples`)."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValidationError(f"cannot read LoCoMo data {p}: {exc}") from None
    if not isinstance(raw, list):
        raise ValidationError(f"{p}: expected a JSON list of samples")
    return parse_samples(raw, only)

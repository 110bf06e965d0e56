"""Shared data of the LLM client and validation tests."""

from __future__ import annotations

from datetime import UTC, datetime

from gaama.extract.types import EpisodeView

MODEL = "fake-model"


def episodes(n: int = 3) -> list[EpisodeView]:
    ts = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    said = [
        "I went to a pottery workshop yesterday!",
        "That sounds lovely, what did you make?",
        "A small bowl for my kids.",
        "We are going camping next month.",
    ]
    speakers = ["Caroline", "Melanie"]
    out = []
    for i in range(n):
        sp = speakers[i % 2]
        text = said[i % len(said)]
        out.append(
            EpisodeView(
                id=f"ep_{i:024x}",
                speaker=sp,
                raw_text=text,
                text=f"[1:56 pm on 8 May, 2023] {sp}: {text}",
                timestamp=ts,
                turn_id=str(i),
            )
        )
    return out

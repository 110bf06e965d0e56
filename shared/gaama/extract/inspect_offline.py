"""Run the offline extractor over a LoCoMo file and print what it produced.

Usage: ``python -m gaama.extract.inspect_offline PATH [--sample conv-26] [--show 30]``

Only the conversation turns and session times are read; the dataset's LLM-written annotations
(``observation``, ``session_summary``, ``event_summary``) are never touched. Turns are grouped
into chunks of at most ~500 words within a session, the way the extraction service does, and
earlier labels of the same conversation are passed as existing concepts.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gaama.extract.concepts import count_duplicates, extract_concepts
from gaama.extract.offline import OfflineExtractor
from gaama.extract.types import (
    ContextFact,
    EpisodeView,
    ExtractionContext,
    FactDraft,
    ReflectionInput,
)

_CHUNK_WORDS = 500


def parse_session_time(value: str) -> datetime:
    """Parse LoCoMo's "1:56 pm on 8 May, 2023" as an aware UTC datetime."""
    return datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def load_sessions(sample: dict[str, Any]) -> list[list[EpisodeView]]:
    """The episodes of one LoCoMo sample, one list per session, in order."""
    conv = sample["conversation"]
    numbers = sorted(
        int(m.group(1)) for key in conv if (m := re.fullmatch(r"session_(\d+)", key)) and conv[key]
    )
    sessions: list[list[EpisodeView]] = []
    for number in numbers:
        when = parse_session_time(conv[f"session_{number}_date_time"])
        episodes = []
        for turn in conv[f"session_{number}"]:
            raw = turn["text"]
            if turn.get("blip_caption"):
                # How a shared image reaches memory: its caption as a bracketed note.
                raw = f"{raw} [shares {turn['blip_caption']}]"
            stamp = when.strftime("%-d %B %Y %H:%M")
            episodes.append(
                EpisodeView(
                    id=f"{sample['sample_id']}:{turn['dia_id']}",
                    speaker=turn["speaker"],
                    raw_text=raw,
                    text=f"[{stamp}] {turn['speaker']}: {raw}",
                    timestamp=when,
                    turn_id=turn["dia_id"],
                )
            )
        sessions.append(episodes)
    return sessions


def chunk_session(
    episodes: list[EpisodeView], limit: int = _CHUNK_WORDS
) -> list[list[EpisodeView]]:
    """Consecutive episodes grouped into chunks of ≤ ``limit`` words, never splitting a turn."""
    chunks: list[list[EpisodeView]] = []
    current: list[EpisodeView] = []
    words = 0
    for ep in episodes:
        size = len(ep.raw_text.split())
        if current and words + size > limit:
            chunks.append(current)
            current, words = [], 0
        current.append(ep)
        words += size
    if current:
        chunks.append(current)
    return chunks


def run_sample(
    extractor: OfflineExtractor, sample: dict[str, Any]
) -> tuple[list[FactDraft], Counter[str], list[str], int]:
    """Extract a whole conversation; returns facts, concept counts, reflections, duplicates."""
    facts: list[FactDraft] = []
    concepts: Counter[str] = Counter()
    reflections: list[str] = []
    raw_labels: list[str] = []
    names = [sample["conversation"]["speaker_a"], sample["conversation"]["speaker_b"]]
    for session in load_sessions(sample):
        for chunk in chunk_session(session):
            raw_labels.extend(lb for ep in chunk for lb in extract_concepts(ep.raw_text, names))
            context = ExtractionContext(
                concepts=[label for label, _ in concepts.most_common()],
                facts=[ContextFact(id=str(i), text=f.text) for i, f in enumerate(facts[-40:])],
            )
            result = extractor.extract_sync(chunk, context)
            for labels in result.episode_concepts.values():
                concepts.update(labels)
            for fact in result.facts:
                concepts.update(fact.concepts)
            facts.extend(result.facts)
            if result.facts:
                # Reflect over the newest facts, as the reflect service does after each chunk.
                low = max(0, len(facts) - 30)
                window = [
                    ReflectionInput(
                        id=str(low + i), text=f.text, concepts=f.concepts, subject=f.subject
                    )
                    for i, f in enumerate(facts[low:])
                ]
                drafts = extractor.reflect_sync(window, reflections)
                reflections.extend(d.text for d in drafts)
    return facts, concepts, reflections, count_duplicates(raw_labels)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="a LoCoMo JSON file (a list of samples)")
    parser.add_argument("--sample", default="conv-26", help="sample whose facts are shown")
    parser.add_argument("--show", type=int, default=30, help="how many facts to show")
    args = parser.parse_args(argv)
    samples = json.loads(args.path.read_text(encoding="utf-8"))
    extractor = OfflineExtractor()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    out = sys.stdout
    for sample in samples:
        facts, concepts, reflections, dupes = run_sample(extractor, sample)
        turns = sum(len(s) for s in load_sessions(sample))
        out.write(
            f"{sample['sample_id']}: {turns} turns, {len(facts)} facts, "
            f"{len(concepts)} concepts, {dupes} duplicate labels folded, "
            f"{len(reflections)} reflections\n"
        )
        if sample["sample_id"] != args.sample:
            continue
        step = max(1, len(facts) // max(args.show, 1))
        out.write(f"\n-- every {step}th fact of {args.sample} --\n")
        for fact in facts[::step][: args.show]:
            out.write(
                f"[{fact.belief:.2f}] {fact.text}  {{{', '.join(fact.concepts)}}} "
                f"<- {fact.source_episode_ids[0]}\n"
            )
        out.write(f"\n-- concepts of {args.sample} (label: uses) --\n")
        out.write(", ".join(f"{k}:{v}" for k, v in concepts.most_common()) + "\n")
        out.write(f"\n-- first reflections of {args.sample} --\n")
        for text in reflections[:5]:
            out.write(text + "\n")
        out.write("\n")
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    out.write(f"whole file: {cpu:.1f} s CPU, {wall:.1f} s wall\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

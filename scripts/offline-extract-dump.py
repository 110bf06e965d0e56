"""The offline extractor's output on every LoCoMo dev session (chunks of six turns, each with the
same two context concepts) as JSON, to compare two versions of the extractor byte for byte:

    PYTHONPATH=shared:. python scripts/offline-extract-dump.py after.json
    (cd <other tree> && PYTHONPATH=shared:. python <this script> before.json)
    cmp before.json after.json

Prints the turns and the extractor's rate (turns per CPU second) on stderr.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from pathlib import Path

from benchmarks.locomo_data import load_locomo
from gaama.events import TurnReceived
from gaama.extract.offline import OfflineExtractor
from gaama.extract.types import EpisodeView, ExtractionContext

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "locomo" / "locomo_dev.json"
CHUNK = 6


def main() -> None:
    extractor = OfflineExtractor()
    context = ExtractionContext(concepts=["camping_trip", "pottery_class"])
    out: list[object] = []
    turns = 0
    cpu = time.process_time()
    for conv in load_locomo(DATA):
        for session in conv.sessions:
            episodes = []
            for k, t in enumerate(session.turns):
                turn = TurnReceived(
                    tenant="dump",
                    conversation=conv.sample_id,
                    turn_id=t.turn_id,
                    speaker=t.speaker,
                    text=t.text,
                    image_caption=t.image_caption or "",
                    timestamp=session.started + timedelta(seconds=k),
                )
                said = turn.said()
                episodes.append(
                    EpisodeView(t.turn_id, t.speaker, said, said, turn.timestamp, t.turn_id)
                )
            for start in range(0, len(episodes), CHUNK):
                chunk = episodes[start : start + CHUNK]
                turns += len(chunk)
                result = extractor.extract_sync(chunk, context)
                facts = [
                    [f.text, f.subject, f.belief, list(f.concepts), list(f.source_episode_ids)]
                    for f in result.facts
                ]
                concepts = sorted((k, list(v)) for k, v in result.episode_concepts.items())
                out.append([*facts, concepts])
    rate = turns / (time.process_time() - cpu)
    print(f"{turns} turns, {rate:.1f} turns per CPU s", file=sys.stderr)
    Path(sys.argv[1]).write_text(json.dumps(out), encoding="utf-8")


if __name__ == "__main__":
    main()

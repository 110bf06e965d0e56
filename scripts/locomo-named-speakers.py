"""How often a LoCoMo question names one of its conversation's speakers, and how often its
evidence turns are that speaker's: the observation behind the named-person prior
(docs/architecture.md, "Named people"). Counts only; nothing here is used by retrieval.

    PYTHONPATH=shared:. python scripts/locomo-named-speakers.py [locomo.json]

A speaker is named when every word of their name is a word of the question, as the prior
decides it (:func:`gaama.retrieval.candidates.person_prior`). Questions of categories 1–4 with
usable evidence, as the benchmark counts them.
"""

from __future__ import annotations

import sys
from collections import Counter

from benchmarks.locomo_data import CATEGORIES, load_locomo
from benchmarks.metrics import usable_evidence
from gaama.ids import episode_id
from gaama.retrieval.candidates import person_prior


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/locomo/locomo_dev.json"
    counts: Counter[str] = Counter()
    for conv in load_locomo(path):
        speaker = {t.turn_id: t.speaker for s in conv.sessions for t in s.turns}
        for q in conv.questions:
            evidence = usable_evidence(q.evidence, conv.turn_ids)
            if q.category not in CATEGORIES or not evidence:
                continue
            counts["questions"] += 1
            # The prior over two candidates, one said by each speaker: who the question names.
            shown = {
                episode_id("t", conv.sample_id, name): {"speaker": name} for name in conv.speakers
            }
            named = [shown[node]["speaker"] for node in person_prior(q.question, shown, shown, 1)]
            if len(named) != 1:
                continue
            counts["naming one speaker"] += 1
            for turn in evidence:
                counts["their evidence turns"] += 1
                counts["said by the speaker named"] += speaker[turn] == named[0]
    for name, n in counts.items():
        print(f"{name}: {n}")


if __name__ == "__main__":
    main()

"""Output of ``python -m benchmarks locomo``: the Markdown table and the docs section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.metrics import KS

DOCS_BEGIN, DOCS_END = "<!-- locomo:begin -->", "<!-- locomo:end -->"


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def markdown_table(doc: dict[str, Any]) -> str:
    """Modes × (overall, categories) with the recall, words and latency columns."""
    judged = any(r["overall"].get("reward") is not None for r in doc["modes"].values())
    head = [
        "mode",
        "questions",
        "R@5",
        "R@10",
        "R@20",
        f"R@{doc['budget']}w",
        *(f"R@{b}t" for b in doc.get("token_budgets", [])),
        "n",
        "words",
        "tokens",
        "ms mean / p50",
    ] + (["reward", "J"] if judged else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    names = {
        "overall": "all 1–4",
        "cat1": "1 multi-hop",
        "cat2": "2 temporal",
        "cat3": "3 open-domain",
        "cat4": "4 single-hop",
    }
    for mode, rows in doc["modes"].items():
        for scope, name in names.items():
            r = rows[scope]
            cells = [
                f"**{mode}**" if scope == "overall" else mode,
                name,
                *(_fmt(r[f"R@{k}"]) for k in KS),
                _fmt(r["R@budget"]),
                *(_fmt(r.get(f"R@{b}t")) for b in doc.get("token_budgets", [])),
                _fmt(r["n"]),
                _fmt(r["words"], 0),
                _fmt(r.get("tokens"), 0),
                f"{_fmt(r['latency_ms'], 1)} / {_fmt(r['latency_p50_ms'], 1)}",
            ]
            if judged:
                cells += [_fmt(r.get("reward")), _fmt(r.get("J"))]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def docs_section(doc: dict[str, Any]) -> str:
    g = doc["graph"]
    edges = ", ".join(f"{k} {v}" for k, v in g["edges"].items())
    secs = doc["seconds"]
    return "\n".join(
        [
            DOCS_BEGIN,
            "## LoCoMo evidence recall",
            "",
            f"Run on {doc['date']} with `{doc['command']}` (extractor: {doc['extractor']}; "
            f"conversations {', '.join(doc['conversations'])}; {doc['questions']} questions of "
            f"categories 1–4, {doc['skipped_no_evidence']} skipped for lack of usable evidence; "
            f"word budget {doc['budget']}).",
            "",
            "R@k: share of a question's evidence turns covered by the first k ranked items "
            "(an episode covers its turn, a fact its source turns, a reflection none), averaged; "
            f"R@{doc['budget']}w: the same over the packed memory; "
            + "".join(f"R@{b}t, " for b in doc.get("token_budgets", []))
            + "the same over the memory packed within that many tokens of the embedder's "
            "tokenizer; tokens: the mean tokens of the word budget's memory. Latency is per "
            "query (of the word budget's retrieval), question embedding included.",
            "",
            markdown_table(doc),
            "",
            f"Graph: {g['episodes']} episodes, {g['facts']} facts, {g['concepts']} concepts, "
            f"{g['reflections']} reflections; edges: {edges}. "
            f"Wall time: {secs.get('total', 0):.0f} s ({secs.get('ingest', 0):.0f} s ingest + "
            f"extraction, {secs.get('questions', 0):.0f} s questions).",
            *_duplicates_line(doc),
            DOCS_END,
        ]
    )


def _duplicates_line(doc: dict[str, Any]) -> list[str]:
    """Concept canonicalisation, measured: distinct labels proposed vs concepts stored."""
    dup = doc.get("concept_duplicates") or {}
    if dup.get("raw_labels") is None:
        return []
    return [
        "",
        "Concept canonicalisation: summed over the tenants (concepts are per tenant), the "
        f"extractor proposed {dup['raw_labels']} distinct labels; "
        f"{dup['after_canonicalisation']} concepts were stored, so {dup['removed']} labels were "
        "merged into an existing concept as near-duplicates (same lemmas, string similarity, or "
        "embedding similarity; per tenant).",
    ]


def write_docs(path: Path, section: str) -> None:
    """Replace the marked LoCoMo section of ``path`` (create the file, or append, if absent)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if DOCS_BEGIN in text and DOCS_END in text:
        head, rest = text.split(DOCS_BEGIN, 1)
        tail = rest.split(DOCS_END, 1)[1]
        text = head + section + tail
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")

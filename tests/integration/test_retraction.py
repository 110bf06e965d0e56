"""Retraction inside the conversation: a turn asking the memory to forget something said earlier
ends the speaker's matching facts (``retracted``) and redacts their words, and those of the
speaker's turns they came from, from search, list, export, node reads and the vectors; the
audit keeps digests. "That's not true any more" ends without redacting. Real Redis, offline
extractor, the query service in-process."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gaama.episodes import episode_node, episode_stored
from gaama.events import EpisodeStored, TurnReceived
from gaama.model import NodeKind
from gaama.store.validity import REDACTED_TEXT
from tests.component.test_extraction_pipeline import pipelines
from tests.integration.test_query_api import A, make_app, with_keys

pytestmark = pytest.mark.requires_stack

TENANT = "tenant-a"
SECRET = "K4471902"
START = datetime(2024, 5, 1, 9, tzinfo=UTC)
SAID = f"By the way, my passport number is {SECRET}."
DAYS = [
    [("Dana", SAID), ("Sam", "Noted."), ("Dana", "I work at Brightwell.")],
    [("Sam", "How was your week?"), ("Dana", "Please forget my passport number.")],
]


async def store_turns(
    graph, embedder, tenant: str, conv: str, turns: list[tuple[str, str]], start: datetime
) -> list[EpisodeStored]:
    """One session's turns, stored as the ingest service stores them; the data subject is the
    user, Dana or Lena, whoever speaks first."""
    out = []
    for i, (speaker, text) in enumerate(turns):
        t = TurnReceived(
            tenant=tenant,
            conversation=conv,
            turn_id=f"D1:{i + 1}",
            speaker=speaker,
            text=text,
            timestamp=start + timedelta(minutes=i),
            subject=next(s for s, _ in turns if s != "Sam"),
            end_of_session=i == len(turns) - 1,
        )
        [v] = await embedder.embed([t.episode_text()])
        node = episode_node(t, v.tolist())
        await graph.append_episode(node)
        out.append(episode_stored(t, node))
    return out


async def _ingest(settings, graph, index, embedder, conv: str) -> list[str]:
    extract, _, _ = pipelines(settings, graph, index, embedder)
    episode_ids = []
    for day, turns in enumerate(DAYS):
        # a session a conversation (turn ids restart with each)
        when = START + timedelta(days=day * 3)
        events = await store_turns(graph, embedder, TENANT, f"{conv}-{day}", turns, when)
        episode_ids += [ev.episode_id for ev in events]
        for ev in events:
            await extract.on_episode(ev)
    return episode_ids


def _texts(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


async def test_a_request_to_forget_redacts_every_read(settings, graph, index, embedder):
    said_ep, _, work_ep, _, request_ep = await _ingest(settings, graph, index, embedder, "c1")
    client, _ = make_app(with_keys(settings), graph, index, embedder)
    async with client as c:
        for query in ("What is Dana's passport number?", SECRET, "passport"):
            r = await c.post("/v1/search", headers=A, json={"query": query, "k": 50})
            assert r.status_code == 200
            assert SECRET not in _texts(r.json()), query
            assert said_ep not in {i["id"] for i in r.json()["ranked"]}
        listed = await c.get("/v1/memories", headers=A, params={"limit": 200})
        assert listed.status_code == 200 and listed.json()["items"]
        assert SECRET not in _texts(listed.json())
        async with c.stream("GET", "/v1/export", headers=A, params={"subject": "Dana"}) as r:
            lines = [json.loads(x) async for x in r.aiter_lines() if x]
        nodes = {x["id"]: x for x in lines if x["type"] == "node"}
        assert said_ep in nodes and REDACTED_TEXT in nodes[said_ep]["text"]
        assert SECRET not in _texts(lines)
        node = await c.get(f"/v1/nodes/{said_ep}", headers=A)
        assert node.status_code == 200 and SECRET not in _texts(node.json())
        # what was not named stays as it was
        kept = await c.get(f"/v1/nodes/{work_ep}", headers=A)
        assert "Brightwell" in kept.json()["text"]
    facts = [
        n for n in (await graph.get_nodes(TENANT, list(nodes))).values() if n.kind is NodeKind.FACT
    ]
    retracted = [f for f in facts if f.extra.get("superseded_reason") == "retracted"]
    assert retracted and all(f.extra.get("valid_to") for f in retracted)
    assert all(f.extra.get("superseded_by") == request_ep for f in retracted)
    assert not any("forget" in f.text.lower() for f in facts)  # the request is not a fact
    # the vector of the redacted turn is gone: a search for its words does not find it
    [vec] = await embedder.embed([SAID])
    hits = await index.knn(TENANT, vec, 20, kinds=[NodeKind.EPISODE])
    assert said_ep not in {h.id for h in hits}
    assert not np.any(await graph.vectors(TENANT, [said_ep], embedder.dim))
    # the audit keeps a digest of what was redacted, never the words
    audit = [
        json.loads(x) for x in await graph.redis.lrange(graph.keys.state(TENANT, "audit"), 0, -1)
    ]
    entry = next(x for x in audit if x["event"] == "redacted")
    assert said_ep in entry["digests"] and entry["request"] == request_ep
    assert SECRET not in _texts(audit)


async def test_a_replay_redacts_nothing_twice(settings, graph, index, embedder):
    said_ep, *_ = await _ingest(settings, graph, index, embedder, "c4")
    before = await graph.get_nodes(TENANT, [said_ep])
    await _ingest(settings, graph, index, embedder, "c4")  # every turn redelivered
    assert await graph.get_nodes(TENANT, [said_ep]) == before
    audit = await graph.redis.lrange(graph.keys.state(TENANT, "audit"), 0, -1)
    assert sum(said_ep in json.loads(x).get("digests", {}) for x in audit) == 1


async def test_redaction_can_be_turned_off(settings, graph, index, embedder):
    off = settings.model_copy(update={"redact_retracted": False})
    said_ep, *_ = await _ingest(off, graph, index, embedder, "c2")
    [node] = (await graph.get_nodes(TENANT, [said_ep])).values()
    assert SECRET in node.text  # the words stay; the fact still ends
    facts = await graph.neighbours(TENANT, [said_ep])
    derived = [nb.node for nb in facts[said_ep] if not nb.outgoing]
    ended = await graph.get_nodes(TENANT, derived)
    assert any(n.extra.get("superseded_reason") == "retracted" for n in ended.values())


async def test_not_true_any_more_ends_without_redacting(settings, graph, index, embedder):
    extract, _, _ = pipelines(settings, graph, index, embedder)
    turns = [
        [("Lena", "I'm allergic to pollen."), ("Sam", "Oh no.")],
        [("Lena", "Remember my pollen allergy? That's not true any more, I outgrew it.")],
    ]
    first = None
    for day, said in enumerate(turns):
        when = START + timedelta(days=day)
        events = await store_turns(graph, embedder, TENANT, f"c3-{day}", said, when)
        first = first or events[0].episode_id
        for ev in events:
            await extract.on_episode(ev)
    [episode] = (await graph.get_nodes(TENANT, [first])).values()
    assert "pollen" in episode.text and episode.extra.get("valid_to")
    facts = await graph.get_nodes(
        TENANT, [nb.node for nb in (await graph.neighbours(TENANT, [first]))[first]]
    )
    allergy = [f for f in facts.values() if f.kind is NodeKind.FACT]
    assert allergy and all(f.extra.get("superseded_reason") == "retracted" for f in allergy)

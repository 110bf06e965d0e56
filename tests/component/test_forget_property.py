"""Zero residue as a property (hypothesis, real Redis, the real handlers of every stage):
random interleavings of turns of several conversations and subjects in two tenants, forgets of
random scopes at random points. After the stream drains, no search, node read, list or export
returns a forgotten turn, no key of the tenant holds a forgotten id, text or vector, the other
tenant is untouched, and — when only conversations were forgotten — the surviving episodes,
facts and their NEXT / DERIVED_FROM edges equal a run that never saw the forgotten turns."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gaama import ids
from gaama.config import Settings
from gaama.events import TOPIC_TURNS, ForgetRequested, TurnReceived, conversation_key
from gaama.model import NodeKind
from gaama.retrieval.search import Retriever
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex
from services.query.memories import ListQuery, list_memories, visible
from tests.component.test_forget_cascade import START, dump, graph_of, residue
from tests.support.stream import Stream, record

pytestmark = pytest.mark.requires_stack

SPEAKERS = ("Caroline", "Melanie")
POOL = [
    "I went to a support group on Tuesday and it helped a lot.",
    "I painted a lake sunrise last year and it relaxes me.",
    "We are adopting a child through an agency in Boston.",
    "My kids love camping at the beach in summer.",
    "I started learning the violin in March.",
    "I made a blue bowl in my pottery class.",
    "My brother opened a bakery in Porto last spring.",
    "We adopted a grey cat called Pixel from the shelter.",
    "I run five kilometres every morning before work.",
    "My grandmother taught me to knit scarves.",
    "I am reading a novel about lighthouse keepers.",
    "We planted tomatoes and basil in the garden.",
    "I volunteer at the animal hospital on Saturdays.",
    "My sister is getting married in Lisbon in June.",
]
CONVS = ("c1", "c2", "c3")
SUBJECTS = ("u1", "u2")
_run = itertools.count()


@dataclass(frozen=True)
class Say:
    conv: str
    subject: str
    line: int  # index into POOL


@dataclass(frozen=True)
class Forget:
    scope: str
    scope_id: str


@dataclass(frozen=True)
class Close:
    """Extraction catches up here: every open chunk is closed and reflected."""


ops = st.lists(
    st.one_of(
        st.builds(
            Say,
            st.sampled_from(CONVS),
            st.sampled_from(SUBJECTS),
            st.integers(0, len(POOL) - 1),
        ),
        st.builds(Forget, st.just("conversation"), st.sampled_from(CONVS)),
        st.builds(Forget, st.just("subject"), st.sampled_from(SUBJECTS)),
        st.builds(Close),
        st.builds(Close),
    ),
    min_size=3,
    max_size=14,
)


def plan(steps: list[Say | Forget], tenant: str):
    """Turn records and forget events in order; which turns each forget covers."""
    records: list[object] = []
    forgotten: set[str] = set()
    seen_lines: set[int] = set()
    turns: list[TurnReceived] = []
    count = dict.fromkeys(CONVS, 0)
    for step in steps:
        if isinstance(step, Close):
            records.append(step)
        elif isinstance(step, Say):
            if step.line in seen_lines:  # each sentence once: a text names one turn
                continue
            seen_lines.add(step.line)
            count[step.conv] += 1
            n = count[step.conv]
            t = TurnReceived(
                tenant=tenant,
                conversation=step.conv,
                turn_id=f"T:{n}",
                speaker=SPEAKERS[n % 2],
                text=POOL[step.line],
                timestamp=START + timedelta(minutes=len(turns)),
                subject=step.subject,
            )
            turns.append(t)
            records.append(record(TOPIC_TURNS, conversation_key(tenant, t.conversation), t))
        else:
            ev = ForgetRequested(
                request_id=uuid.uuid4().hex,
                tenant=tenant,
                scope=step.scope,
                scope_id=step.scope_id,
                partition=0,
            )
            records.append(record(TOPIC_TURNS, ev.key(), ev))
            for t in turns:
                hit = t.conversation if step.scope == "conversation" else t.subject
                if hit == step.scope_id:
                    forgotten.add(t.turn_id + "@" + t.conversation)
    kept = [t for t in turns if t.turn_id + "@" + t.conversation not in forgotten]
    gone = [t for t in turns if t.turn_id + "@" + t.conversation in forgotten]
    return records, gone, kept


async def assert_consistent(graph: GraphStore, tenant: str) -> None:
    """No orphan anywhere: every fact has sources that exist and edges to them, every
    reflection cites facts that exist, every concept has an edge, every adjacency entry points
    at a node, the degree index matches, every episode sits in its conversation's chain."""
    nodes, _ = await graph_of(graph, None, tenant)  # type: ignore[arg-type]
    adj = await graph.neighbours(tenant, list(nodes))
    degrees = await graph.redis.hgetall(graph.keys.degrees(tenant))
    problems = []
    for node_id, node in nodes.items():
        nbs = adj.get(node_id, [])
        problems += [f"{node_id} -> missing {nb.node}" for nb in nbs if nb.node not in nodes]
        if int(degrees.get(node_id.encode(), b"0")) != len(nbs):
            problems.append(f"{node_id}: degree index says {degrees.get(node_id.encode())}")
        if node.kind is NodeKind.FACT:
            sources = [x for x in node.extra.get("sources", "").split(",") if x]
            linked = {nb.node for nb in nbs if nb.kind.value == "DERIVED_FROM"}
            if not sources or set(sources) != linked or not set(sources) <= set(nodes):
                problems.append(f"fact {node_id}: sources {sources}, edges {linked}")
        elif node.kind is NodeKind.REFLECTION:
            if not any(nb.kind.value == "DERIVED_FROM_FACT" for nb in nbs):
                problems.append(f"reflection {node_id} cites nothing")
        elif node.kind is NodeKind.CONCEPT and not nbs:
            problems.append(f"concept {node_id} has no edge")
        elif node.kind is NodeKind.EPISODE:
            chain = await graph.chain(tenant, node.conversation)
            if node_id not in chain:
                problems.append(f"episode {node_id} is not in its chain")
    extra = set(degrees) - {n.encode() for n in nodes}
    problems += [f"degree entry for missing {x!r}" for x in extra]
    assert not problems, "\n".join(problems[:10])


def _rec(t: TurnReceived):
    return record(TOPIC_TURNS, conversation_key(t.tenant, t.conversation), t)


@pytest.fixture
def worlds(settings: Settings, graph: GraphStore, index: VectorIndex, embedder):
    keys = Keys(settings.key_prefix + "clean")
    clean_graph = GraphStore(graph.redis, keys)
    clean_index = VectorIndex(graph.redis, settings.index_name + "-clean", embedder.dim, keys)
    return settings, graph, index, embedder, clean_graph, clean_index


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=ops)
async def test_forgetting_leaves_no_residue(worlds, steps) -> None:
    s, graph, index, embedder, clean_graph, clean_index = worlds
    await clean_index.ensure()
    n = next(_run)
    tenant, bystander = f"p{n}", f"q{n}"
    stream = Stream(s, graph, index, embedder)
    records, gone, kept = plan(steps, tenant)
    # The bystander tenant says the same things and forgets nothing.
    _, _, said = plan([x for x in steps if isinstance(x, Say)], bystander)
    await stream.run([_rec(t) for t in said])
    await stream.flush()
    before = await dump(graph, bystander)

    for step in records:  # one step at a time: chunks close where the plan says
        if isinstance(step, Close):
            await stream.flush()
            continue
        if b'"forget"' in step.value:  # the query service accepts it before publishing it
            f = ForgetRequested.model_validate_json(step.value)
            lane = "c" if f.scope == "conversation" else "p0"
            await stream.forgets.accept(
                tenant, f.request_id, f.scope, f.scope_id, lanes=[lane], requester="t", now=0.0
            )
        await stream.run([step])
    await stream.flush()
    assert not stream.failures

    await assert_consistent(graph, tenant)
    gone_ids = [ids.episode_id(tenant, t.conversation, t.turn_id) for t in gone]
    snapshot = await dump(graph, tenant)
    assert residue(snapshot, gone_ids + [t.text for t in gone], []) == []
    assert await dump(graph, bystander) == before
    hidden = await stream.forgets.hidden(tenant)
    assert not hidden  # every request done
    # Reads: search in every mode, lists, node reads.
    retriever = Retriever(graph, index, embedder, s)
    for t in gone[:3]:
        res = await retriever.search(tenant, t.text, k=20)
        shown = " ".join(
            i.text for i in await visible(graph, tenant, hidden, res.ranked + res.memory)
        )
        assert t.text not in shown
    page = await list_memories(index, graph, hidden, tenant, ListQuery(limit=200))
    assert not {t.text for t in gone} & {i.text for i in page.items}
    assert not await graph.get_nodes(tenant, gone_ids)

    # Only conversations forgotten: the survivors are a clean run's.
    forgot_subject = any(isinstance(x, Forget) and x.scope == "subject" for x in steps)
    if not forgot_subject:
        clean_settings = s.model_copy(update={"key_prefix": clean_graph.keys.prefix})
        clean = Stream(clean_settings, clean_graph, clean_index, embedder)
        kept_values = {_rec(t).value for t in kept}
        for step in records:  # the same closing points, without the forgotten turns
            if isinstance(step, Close):
                await clean.flush()
            elif step.value in kept_values:
                await clean.run([step])
        await clean.flush()
        got_nodes, got_edges = await graph_of(graph, index, tenant)
        want_nodes, want_edges = await graph_of(clean_graph, clean_index, tenant)
        keep = (NodeKind.EPISODE, NodeKind.FACT)
        assert {i for i, x in got_nodes.items() if x.kind in keep} == {
            i for i, x in want_nodes.items() if x.kind in keep
        }
        core = ("NEXT", "DERIVED_FROM")
        assert {e for e in got_edges if e[2] in core} == {e for e in want_edges if e[2] in core}

"""Ingest: turns → episodes.

Consumes ``gaama.turns.v1`` (key ``<tenant>/<conversation>``), produces ``gaama.episodes.v1``
(same key) and dead-letters to ``gaama.turns.v1.dlq``. Each turn becomes one Episode node with
its vector and a NEXT edge from the previous turn of its conversation, written atomically; a
redelivered turn changes nothing, and its EpisodeStored event is published again (downstream is
idempotent, and a crash between the write and the publish must not lose the event).
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass
from functools import partial
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import from_json

from gaama import ids, tracing
from gaama.config import Settings
from gaama.embed import Embedder
from gaama.episodes import episode_node, episode_stored
from gaama.errors import Forbidden, GaamaError, StoreUnavailable, ValidationError
from gaama.events import (
    CAPTION_MAX,
    SPEAKER_MAX,
    TOPIC_EPISODES,
    ForgetRequested,
    TurnReceived,
    conversation_key,
    decode_keyed,
    describe,
    parse_time,
)
from gaama.forgetting import Forgetting
from gaama.model import Node
from gaama.store.graph import GraphStore
from services.runtime.auth import Caller
from services.runtime.records import (
    BatchResult,
    Failure,
    Outgoing,
    Record,
    decoded,
    forgetting_not_wired,
)
from services.runtime.tracing import batch_links, handling

log = logging.getLogger("gaama.ingest")


@dataclass
class IngestDeps:
    settings: Settings
    graph: GraphStore
    embedder: Embedder
    forgetting: Forgetting | None = None


def record_max_bytes(settings: Settings) -> int:
    """The largest turn record worth decoding: every text field at its limit, each character at
    its longest JSON form (12 bytes: an ASCII-escaped surrogate pair), plus the envelope. Larger
    records are dead-lettered before they are parsed."""
    chars = settings.turn_max_chars + CAPTION_MAX + SPEAKER_MAX + 3 * ids.IDENT_MAX
    return 12 * chars + 4096


def validate_turn(record: Record, settings: Settings) -> TurnReceived | ForgetRequested:
    """Decode a consumed record (a turn, or a forget request riding the same topic) and check it
    against its key; raise ValidationError saying why."""
    limit = record_max_bytes(settings)
    if len(record.value) > limit:
        raise ValidationError(
            f"record of {len(record.value)} bytes; a turn is at most {limit} bytes "
            f"(derived from GAAMA_TURN_MAX_CHARS)",
            reason="too_large",
        )
    event = decode_keyed(TurnReceived, record.key, record.value)
    if isinstance(event, ForgetRequested):
        return event
    turn = event
    if len(turn.text) > settings.turn_max_chars:
        raise ValidationError(
            f"text has {len(turn.text)} characters; the limit is "
            f"{settings.turn_max_chars} (GAAMA_TURN_MAX_CHARS)",
            reason="too_large",
        )
    return turn


async def handle(batch: list[Record], deps: IngestDeps) -> BatchResult:
    """Store a batch of turns in arrival order (which is turn order per conversation). A forget
    request splits the batch: the turns before it are stored first, then its cut is taken.

    The existence check and the embedding are done here; the appends and cuts are left, in
    that order, in ``result.writes``, which the runtime makes behind the next batch's
    embedding, in batch order."""
    result = BatchResult()
    turns: list[tuple[Record, TurnReceived]] = []
    for record, event in decoded(batch, result, lambda r: validate_turn(r, deps.settings)):
        if isinstance(event, ForgetRequested):
            await _store(turns, deps, result)
            turns = []
            if deps.forgetting is None:
                result.failed.append(forgetting_not_wired(record))
                continue
            result.writes.append(partial(_cut, deps.forgetting, event))
            result.out.append(
                Outgoing(TOPIC_EPISODES, event.key(), event, event.partition, record.headers)
            )
        else:
            turns.append((record, event))
    await _store(turns, deps, result)
    return result


async def _store(
    turns: list[tuple[Record, TurnReceived]], deps: IngestDeps, result: BatchResult
) -> None:
    if not turns:
        return
    nodes = [episode_node(t) for _, t in turns]
    for (record, _), node in zip(turns, nodes, strict=True):
        node.extra["ipart"] = str(record.partition or 0)  # the lane a forget's cut applies to
    # Embed only what is new: a redelivered batch costs one pipeline of EXISTS, no model time.
    present = await _existing(deps.graph, nodes)
    todo = [i for i, n in enumerate(nodes) if n.id not in present]
    if todo:
        # The batch's work is done once: its span is the first turn's, linked to the others.
        first = turns[todo[0]]
        with (
            handling(first[0], first[1].tenant),
            tracing.span(
                "episode.embed",
                lambda: {"gaama.episodes": len(todo)},
                links=batch_links([turns[i][0] for i in todo[1:]]),
            ),
        ):
            vectors = await deps.embedder.embed([nodes[i].text for i in todo])
        for row, i in enumerate(todo):
            nodes[i].vector = vectors[row].tolist()
    # Turns whose node exists (a redelivery) are left out; the rest in arrival order.
    new = [n for n in nodes if n.vector is not None]
    events = {
        node.id: Outgoing(
            TOPIC_EPISODES,
            conversation_key(turn.tenant, turn.conversation),
            episode_stored(turn, node),
            headers=record.headers,
        )
        for (record, turn), node in zip(turns, nodes, strict=True)
    }
    result.out += events.values()
    if not new:
        return
    records = {node.id: record for (record, _), node in zip(turns, nodes, strict=True)}
    written = [records[n.id] for n in new]

    async def append(into: BatchResult) -> None:
        with (
            handling(written[0], new[0].tenant),
            tracing.span(
                "episode.write",
                lambda: {
                    "gaama.episodes": len(new),
                    "gaama.tenant.digest": tracing.tenant_digest(new[0].tenant),
                },
                links=batch_links(written[1:]),
            ),
        ):
            await _append(into)

    async def _append(into: BatchResult) -> None:
        try:
            into.stored["episode"] += sum(await deps.graph.append_episodes(new))
        except StoreUnavailable:
            raise  # retried by the runtime
        except Exception:  # noqa: BLE001 - narrowed down below, as the runtime's policy does
            log.warning("appending %d episodes failed; appending them one by one", len(new))
            for node in {n.id: n for n in new}.values():  # a turn sent twice: once
                failure = await _append_one(deps.graph, node, records[node.id])
                if failure is None:
                    continue
                into.failed.append(failure)
                into.out.remove(events[node.id])  # not stored: nothing to announce

    result.writes.append(append)


async def _cut(forgetting: Forgetting, event: ForgetRequested, _: BatchResult) -> None:
    await forgetting.at_ingest(event)


async def _append_one(graph: GraphStore, node: Node, record: Record) -> Failure | None:
    """Append one episode; the failure to dead-letter when it cannot be (an outage raises)."""
    try:
        await graph.append_episodes([node])
    except StoreUnavailable:
        raise
    except GaamaError as exc:
        return Failure(record, exc.reason, str(exc))
    except Exception as exc:  # dead-lettered with the reason, never lost silently
        log.exception("appending episode %s failed", node.id)
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return Failure(record, "error", detail)
    return None


async def _existing(graph: GraphStore, nodes: list[Node]) -> set[str]:
    out: set[str] = set()
    by_tenant: dict[str, list[str]] = {}
    for n in nodes:
        by_tenant.setdefault(n.tenant, []).append(n.id)
    for tenant, node_ids in by_tenant.items():
        out |= await graph.existing(tenant, node_ids)
    return out


# --- HTTP: POST /v1/turns ------------------------------------------------------------------

MAX_TURNS_PER_REQUEST = 1000


class TurnIn(BaseModel):
    """One turn in an HTTP request. The tenant comes from the API key, never from here.
    Types are strict: ``"yes"`` is not a bool and ``true`` is not a timestamp."""

    model_config = ConfigDict(extra="forbid", strict=True)
    conversation: ids.ConversationId
    turn_id: ids.TurnId | None = None
    speaker: ids.Text = Field(min_length=1, max_length=SPEAKER_MAX)
    text: ids.Text
    timestamp: str | int | float
    subject: ids.SubjectId = ""
    image_caption: ids.Text = Field("", max_length=CAPTION_MAX)
    end_of_session: bool = False

    @field_validator("text")
    @classmethod
    def _text(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("text is empty")
        return v

    @field_validator("timestamp")
    @classmethod
    def _ts(cls, v: str | float) -> str | float:
        parse_time(v)
        return v


class TurnsIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    turns: list[TurnIn] = Field(min_length=1, max_length=MAX_TURNS_PER_REQUEST)


class MalformedBody(ValidationError):
    """A request body that is not JSON (HTTP 400)."""

    reason = "malformed"
    http_status = 400


def parse_json(raw: bytes) -> Any:
    """A request body as JSON; MalformedBody for anything else (including nesting past the
    parser's limit and lone surrogates, which ``json.loads`` would crash on or let through)."""
    try:
        return from_json(raw)
    except ValueError as exc:
        raise MalformedBody(f"body is not valid JSON: {ids.preview(str(exc), 200)[1:-1]}") from None


def parse_turns_request(body: Any, tenant: str, settings: Settings) -> list[TurnReceived]:
    """Validate a POST /v1/turns body (one turn or ``{"turns": [...]}``) for ``tenant``."""
    if isinstance(body, dict) and "turns" not in body:
        body = {"turns": [body]}
    try:
        req = TurnsIn.model_validate(body)
    except PydanticValidationError as exc:
        raise ValidationError(describe(exc)) from None
    out = []
    for i, t in enumerate(req.turns):
        if len(t.text) > settings.turn_max_chars:
            raise ValidationError(
                f"turns.{i}.text: {len(t.text)} characters; the limit is "
                f"{settings.turn_max_chars} (GAAMA_TURN_MAX_CHARS)",
                reason="too_large",
            )
        turn_id = t.turn_id or ids.derived_turn_id(str(t.timestamp), t.speaker, t.text)
        try:
            out.append(
                TurnReceived(
                    tenant=tenant,
                    conversation=t.conversation,
                    turn_id=turn_id,
                    speaker=t.speaker,
                    text=t.text,
                    timestamp=parse_time(t.timestamp),
                    subject=t.subject,
                    image_caption=t.image_caption,
                    end_of_session=t.end_of_session,
                )
            )
        except PydanticValidationError as exc:
            raise ValidationError(f"turns.{i}: {describe(exc)}") from None
    return out


def bound_turns(turns: list[TurnReceived], who: Caller) -> list[TurnReceived]:
    """``turns`` as ``who`` may write them: unchanged for a tenant key; for a token, each turn
    carries the token's subject and stays in its conversation when it is bound to one.

    Raises:
        Forbidden: a turn naming another subject or conversation than the token's (nothing of
            the request is written).
    """
    if who.token is None:
        return turns
    out = []
    for i, t in enumerate(turns):
        try:
            subject, _ = who.scope(t.subject or None, t.conversation)
        except Forbidden as exc:
            raise Forbidden(f"turns.{i}: {exc}") from None
        out.append(t if t.subject == subject else t.model_copy(update={"subject": subject}))
    return out

"""Turns become episodes: the node the ingest stage writes and the event it publishes.

Kept in the core so every write path — the ingest service, the LoCoMo harness, tests — builds
episodes the same way.
"""

from __future__ import annotations

from gaama import ids
from gaama.events import EpisodeStored, TurnReceived
from gaama.model import Node, NodeKind


def episode_node(turn: TurnReceived, vector: list[float] | None = None) -> Node:
    """The Episode node of ``turn``: verbatim text with its session time, and its vector."""
    return Node(
        id=ids.episode_id(turn.tenant, turn.conversation, turn.turn_id),
        tenant=turn.tenant,
        kind=NodeKind.EPISODE,
        text=turn.episode_text(),
        time=turn.timestamp.timestamp(),
        conversation=turn.conversation,
        subject=turn.subject,
        turn_id=turn.turn_id,
        speaker=turn.speaker,
        vector=vector,
        extra={"raw": turn.said()},
    )


def episode_stored(turn: TurnReceived, node: Node) -> EpisodeStored:
    """The ``gaama.episodes.v1`` event announcing ``node``."""
    return EpisodeStored(
        tenant=turn.tenant,
        conversation=turn.conversation,
        episode_id=node.id,
        turn_id=turn.turn_id,
        speaker=turn.speaker,
        text=node.text,
        raw_text=turn.said(),
        timestamp=turn.timestamp,
        subject=turn.subject,
        end_of_session=turn.end_of_session,
    )

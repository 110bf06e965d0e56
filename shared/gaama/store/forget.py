"""Forget requests in Redis: acceptance, the read-time hide marker, the cut, the cascade.

A request moves through the stream behind every turn produced before it (see
:class:`gaama.events.ForgetRequested`); this module holds what must survive a crash:

- the request (``state:{t}:forget:<id>``: status, scope kind, the scope id's digest, requester,
  times, counts removed — never the forgotten content) and the lanes it still has to cross
  (``…:pending``: ``c`` for a conversation's single message, ``p0``…``pN`` for a fan-out);
- the hide marker (``state:{t}:hidden``), set when the request is accepted and checked by every
  read, so the scope disappears at once, long before the cascade has run;
- the cut: when the request passes the ingest stage on a lane, the tenant's ingest counter at
  that moment. Episodes ingested on that lane before it (``iseq`` ≤ cut) are forgotten; turns
  sent after the request are ingested normally, even into a conversation being forgotten;
- the audit log (``state:{t}:audit``) and a global index of pending requests (the alert on
  requests pending too long reads it).

The cascade runs once every lane has arrived at the last stage, in batches: each batch is one
Lua script (``lua/forget_episodes.lua``), so a crash leaves every node either fully there or
fully gone, and running the cascade again finishes the job.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis

from gaama import ids
from gaama.model import NodeKind
from gaama.store import cluster, scripts
from gaama.store.codecs import as_text, episode_said
from gaama.store.errors import store_errors
from gaama.store.keys import Keys

if TYPE_CHECKING:
    from gaama.store.graph import GraphStore

AUDIT_MAX = 10_000
#: The status of a request whose publication failed (:meth:`ForgetStore.abandon`).
ABANDONED = "abandoned"
_BATCH = 200
_KINDS = ("episode", "fact", "reflection", "concept")


def marker(scope: str, scope_id: str) -> str:
    """The hide-marker field of a scope: its kind and the digest of its id."""
    return f"{scope}:{ids.tag(scope_id)}"


@dataclass(frozen=True)
class Hidden:
    """Scopes of a tenant that reads must not show (forgets accepted, not yet done)."""

    conversations: frozenset[str] = frozenset()  # digests
    subjects: frozenset[str] = frozenset()
    everything: bool = False

    def __bool__(self) -> bool:
        return bool(self.conversations or self.subjects or self.everything)

    def covers(self, conversation: str, subject: str) -> bool:
        """Whether a node of this conversation and subject is hidden."""
        return (
            self.everything
            or (bool(conversation) and ids.tag(conversation) in self.conversations)
            or (bool(subject) and ids.tag(subject) in self.subjects)
        )


class ForgetRefused(Exception):
    """A stage met a forget request that is not accepted and pending (``reason``: ``unknown``,
    ``abandoned`` or ``done``): the event is dropped, nothing was written."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def hidden_nodes(
    graph: GraphStore,
    tenant: str,
    hidden: Hidden,
    node_ids: Sequence[str],
    sources: Mapping[str, Sequence[str]] | None = None,
) -> set[str]:
    """The nodes among ``node_ids`` that pending forgets hide, decided by provenance: a node
    whose every source episode is of a hidden scope. An episode is its own source; a fact's
    are its ``sources``; a reflection's those of the facts it cites; a concept's those of the
    episodes and facts it labels (the cascade removes a concept left without them). A node
    without source episodes is decided by its own conversation and subject.

    ``sources`` gives the source episodes of nodes already known (a search's provenance); the
    others' are read in one round trip (two for concepts), the scopes of every episode in one
    more."""
    if not hidden or not node_ids:
        return set()
    if hidden.everything:
        return set(node_ids)
    known = dict(sources or {})
    missing = [n for n in dict.fromkeys(node_ids) if n not in known]
    concepts = [n for n in missing if n.startswith(ids.kind_prefix(NodeKind.CONCEPT) + "_")]
    labelled = {
        c: [nb.node for nb in nbs] for c, nbs in (await graph.neighbours(tenant, concepts)).items()
    }
    wanted = list(dict.fromkeys([*missing, *(n for ns in labelled.values() for n in ns)]))
    for node, turns in (await graph.provenance(tenant, wanted)).items():
        known.setdefault(node, [e for e, _ in turns])
    for c, linked in labelled.items():
        known[c] = list(dict.fromkeys(e for n in linked for e in known.get(n, ())))
    episodes = {e for n in node_ids for e in known.get(n, ())} | set(node_ids)
    rows = await graph.get_fields(tenant, sorted(episodes), ["conversation", "subject"])
    scopes = {n: tuple(as_text(v) for v in r) for n, r in rows.items()}

    def covered(node: str) -> bool:
        conv, subject = scopes.get(node, ("", ""))
        return hidden.covers(conv, subject)

    return {
        n for n in node_ids if (all(covered(e) for e in known[n]) if known.get(n) else covered(n))
    }


@dataclass
class ForgetStatus:
    request_id: str
    status: str
    scope: str
    removed: dict[str, int] = field(default_factory=dict)
    requested_at: float = 0.0
    done_at: float | None = None


class ForgetStore:
    """Forget requests of every tenant; each call is scoped to one tenant."""

    def __init__(self, redis: aioredis.Redis, keys: Keys | None = None) -> None:
        self.redis = redis
        self.keys = keys or Keys()
        self._cut = scripts.register(redis, "forget_cut.lua")
        self._arrive = scripts.register(redis, "forget_arrive.lua")
        self._finish = scripts.register(redis, "forget_finish.lua")
        self._forget = scripts.register(redis, "forget_episodes.lua")
        self._sweep = scripts.register(redis, "forget_sweep.lua")

    # --- keys --------------------------------------------------------------------------------

    def _req(self, tenant: str, request_id: str) -> str:
        return self.keys.state(tenant, "forget", request_id)

    def _pending(self, tenant: str, request_id: str) -> str:
        return self.keys.state(tenant, "forget", request_id, "pending")

    @property
    def _global_pending(self) -> str:
        # Not a tenant's key: one sorted set across tenants for the "pending too long" alert.
        return f"{self.keys.prefix}:forget-pending"

    # --- acceptance ----------------------------------------------------------------------------

    async def accept(
        self,
        tenant: str,
        request_id: str,
        scope: str,
        scope_id: str,
        *,
        lanes: Iterable[str],
        requester: str,
        now: float,
    ) -> None:
        """Record an accepted request and hide its scope from every read, atomically."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(
            self._req(tenant, request_id),
            mapping={
                "status": "pending",
                "scope": scope,
                "scope_tag": ids.tag(scope_id),
                "requester": requester,
                "requested_at": repr(now),
            },
        )
        pipe.sadd(self._pending(tenant, request_id), *lanes)
        pipe.hset(self.keys.state(tenant, "hidden"), marker(scope, scope_id), request_id)
        self._audit(pipe, tenant, request_id, "accepted", scope, scope_id, requester, now)
        with store_errors():
            await pipe.execute()
            # Outside the tenant's transaction: a key of no tenant's slot (Redis Cluster).
            await self.redis.zadd(self._global_pending, {f"{tenant}|{request_id}": now})

    async def abandon(self, tenant: str, request_id: str, scope: str, scope_id: str) -> None:
        """Undo :meth:`accept` for a request that could not be published: the record becomes
        an ``abandoned`` tombstone (no cuts, no lanes), the hide marker goes, the audit log
        says so. A lane of it that was published is dropped by every stage (:meth:`cut`,
        :meth:`arrive`, :meth:`finish` and the cascade act only on a pending request)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(self._req(tenant, request_id), self._pending(tenant, request_id))
        pipe.hset(
            self._req(tenant, request_id),
            mapping={"status": ABANDONED, "scope": scope, "scope_tag": ids.tag(scope_id)},
        )
        pipe.hdel(self.keys.state(tenant, "hidden"), marker(scope, scope_id))
        self._audit(pipe, tenant, request_id, ABANDONED, scope, scope_id, "", time.time())
        with store_errors():
            await pipe.execute()
            await self.redis.zrem(self._global_pending, f"{tenant}|{request_id}")

    # --- the stages ----------------------------------------------------------------------------

    async def cut(self, tenant: str, request_id: str, lane: str) -> int:
        """Fix the lane's cut at the tenant's ingest counter (ingest stage; first call wins).

        Raises:
            ForgetRefused: no accepted request of that id (unknown or abandoned); nothing was
                written.
        """
        with store_errors():
            ok, value = await self._cut(
                keys=[self._req(tenant, request_id), self.keys.state(tenant, "iseq")], args=[lane]
            )
        if not int(ok):
            raise ForgetRefused(as_text(value))
        return int(value)

    async def cuts(self, tenant: str, request_id: str) -> dict[str, int]:
        with store_errors():
            raw = await self.redis.hgetall(self._req(tenant, request_id))
        out = {}
        for k, v in raw.items():
            name = as_text(k)
            if name.startswith("cut:"):
                out[name[4:]] = int(as_text(v))
        return out

    async def arrive(self, tenant: str, request_id: str, lane: str) -> bool:
        """The request reached the last stage on ``lane``; True once every lane has.

        Raises:
            ForgetRefused: the request is not pending (``done``, abandoned or unknown); no
                lane was counted.
        """
        with store_errors():
            ok, value = await self._arrive(
                keys=[self._req(tenant, request_id), self._pending(tenant, request_id)],
                args=[lane],
            )
        if not int(ok):
            raise ForgetRefused(as_text(value))
        return int(value) == 0

    async def doomed_episodes(
        self, tenant: str, scope: str, scope_id: str, cuts: dict[str, int]
    ) -> list[str]:
        """Episodes of the scope ingested before their lane's cut (a conversation's single
        message uses lane ``c``; a fan-out lane ``p<partition>``)."""
        with store_errors():
            if scope == "conversation":
                candidates = [
                    as_text(x)
                    for x in await self.redis.zrange(self.keys.chain(tenant, scope_id), 0, -1)
                ]
            else:
                candidates = await self._episodes_of(tenant)
            rows = await self._fields(tenant, candidates, ("subject", "iseq", "ipart"))
        out = []
        for eid, (subject, iseq, ipart) in zip(candidates, rows, strict=True):
            if scope == "subject" and subject != scope_id:
                continue
            lane = "c" if scope == "conversation" else f"p{ipart or 0}"
            cut = cuts.get(lane)
            if cut is None:
                continue  # the request has not crossed ingest on this lane: nothing to decide
            if not iseq or int(iseq) <= cut:
                out.append(eid)
        return out

    async def remove_episodes(
        self,
        tenant: str,
        episode_ids: list[str],
        progress: Callable[[int], None] | None = None,
        *,
        request_id: str | None = None,
    ) -> dict[str, int]:
        """Run the cascade over ``episode_ids`` in atomic batches; counts removed by kind.

        With ``request_id``, each batch runs only while that request is pending.

        Raises:
            ForgetRefused: the request stopped being pending (abandoned); the batches before
                were made, none after.
        """
        guard = [self._req(tenant, request_id)] if request_id else []
        total = dict.fromkeys(_KINDS, 0)
        args = [
            self.keys.node(tenant, ""),
            self.keys.adj_prefix(tenant),
            self.keys.chain(tenant, ""),
            self.keys.state(tenant, "reflected", ""),
            self.keys.state(tenant, "outbox", ""),
            self.keys.state(tenant, "outbox-index"),
        ]
        for i in range(0, len(episode_ids), _BATCH):
            batch = episode_ids[i : i + _BATCH]
            with store_errors():
                counts = await self._forget(
                    keys=[self.keys.degrees(tenant), *guard], args=[*args, *batch]
                )
                if counts is None:
                    raise ForgetRefused(ABANDONED)
                # After the removal (store/fulltext.py: counts cached under the old token go)
                await self.redis.set(self.keys.text_version(tenant), secrets.token_hex(8))
            for kind, n in zip(_KINDS, counts, strict=True):
                total[kind] += int(n)
            if progress:
                progress(i + len(batch))
        return total

    async def sweep_tenant(self, tenant: str) -> int | None:
        """After a tenant's cascade, when the tenant holds no episode: every key of the tenant
        left (chains, chunk state, markers, the ingest counter), except the forget records and
        the audit log, which say what was done. Returns the keys removed.

        The emptiness check and the sweep are one: the ingest counter is read before the check,
        and each batch of the sweep is unlinked only while the counter is unchanged
        (``lua/forget_sweep.lua``). A turn appended at any moment in between moves the counter,
        and the sweep stops before that turn (returns None): what it wrote is kept."""
        keep = tuple(self.keys.state(tenant, n) for n in ("forget", "audit", "hidden"))
        counter = self.keys.state(tenant, "iseq")
        with store_errors():
            expected = as_text(await self.redis.get(counter))
            if await self.has_episodes(tenant):
                return None
            found: list[str] = []
            for pattern in self.keys.tenant_patterns(tenant):
                near = self.keys.degrees(tenant)  # on a cluster: the tenant's primary only
                async for raw in cluster.scan_keys(self.redis, pattern, near=near):
                    key = as_text(raw)
                    if not key.startswith(keep) and key != counter:
                        found.append(key)
            gone = 0
            batches = [found[i : i + _BATCH] for i in range(0, len(found), _BATCH)]
            for i, batch in enumerate([*batches, []]):
                last = "1" if i == len(batches) else "0"
                n = int(await self._sweep(keys=[counter, *batch], args=[expected, last]))
                if n < 0:
                    return None
                gone += n
        return gone

    async def finish(
        self,
        tenant: str,
        request_id: str,
        scope: str,
        scope_id: str,
        removed: dict[str, int],
        *,
        now: float,
    ) -> bool:
        """Mark the request done with its counts, lift the hide marker, audit it, atomically;
        False (nothing written) when the request is no longer pending."""
        entry = self._entry(request_id, "done", scope, scope_id, "", now, removed)
        with store_errors():
            marked = await self._finish(
                keys=[
                    self._req(tenant, request_id),
                    self._pending(tenant, request_id),
                    self.keys.state(tenant, "hidden"),
                    self.keys.state(tenant, "audit"),
                ],
                args=[json.dumps(removed), repr(now), marker(scope, scope_id), entry, AUDIT_MAX],
            )
            if not int(marked):
                return False
            await self.redis.zrem(self._global_pending, f"{tenant}|{request_id}")
        return True

    # --- reads ---------------------------------------------------------------------------------

    async def hidden(self, tenant: str) -> Hidden:
        """What reads of ``tenant`` must not show right now (one HGETALL)."""
        with store_errors():
            raw = await self.redis.hkeys(self.keys.state(tenant, "hidden"))
        convs, subjects, everything = set(), set(), False
        for field_ in map(as_text, raw):
            scope, _, tag = field_.partition(":")
            if scope == "conversation":
                convs.add(tag)
            elif scope == "subject":
                subjects.add(tag)
            elif scope == "tenant":
                everything = True
        return Hidden(frozenset(convs), frozenset(subjects), everything)

    async def status(self, tenant: str, request_id: str) -> ForgetStatus | None:
        with store_errors():
            raw = await self.redis.hgetall(self._req(tenant, request_id))
        if not raw:
            return None
        h = {as_text(k): as_text(v) for k, v in raw.items()}
        return ForgetStatus(
            request_id=request_id,
            status=h.get("status", "pending"),
            scope=h.get("scope", ""),
            removed={k: int(v) for k, v in json.loads(h.get("removed") or "{}").items()},
            requested_at=float(h.get("requested_at") or 0),
            done_at=float(h["done_at"]) if h.get("done_at") else None,
        )

    async def audit(self, tenant: str, limit: int = 100) -> list[dict[str, Any]]:
        """The newest audit entries of ``tenant``, newest first."""
        with store_errors():
            rows = await self.redis.lrange(self.keys.state(tenant, "audit"), 0, limit - 1)
        return [json.loads(as_text(r)) for r in rows]

    async def oldest_pending(self) -> float | None:
        """Acceptance time of the oldest request still pending (any tenant)."""
        with store_errors():
            rows = await self.redis.zrange(self._global_pending, 0, 0, withscores=True)
        return float(rows[0][1]) if rows else None

    async def episode_texts(self, tenant: str, episode_ids: list[str]) -> list[str]:
        """What each episode's speaker said (the words an open chunk counted)."""
        with store_errors():
            rows = await self._fields(tenant, episode_ids, ("raw", "text", "speaker"))
        return [episode_said(raw, text, speaker) for raw, text, speaker in rows]

    async def has_episodes(self, tenant: str) -> bool:
        with store_errors():
            return bool(await self._episodes_of(tenant))

    # --- helpers -------------------------------------------------------------------------------

    def _audit(
        self,
        pipe: Any,
        tenant: str,
        request_id: str,
        event: str,
        scope: str,
        scope_id: str,
        requester: str,
        now: float,
        removed: dict[str, int] | None = None,
    ) -> None:
        entry = self._entry(request_id, event, scope, scope_id, requester, now, removed)
        key = self.keys.state(tenant, "audit")
        pipe.lpush(key, entry)
        pipe.ltrim(key, 0, AUDIT_MAX - 1)

    @staticmethod
    def _entry(
        request_id: str,
        event: str,
        scope: str,
        scope_id: str,
        requester: str,
        now: float,
        removed: dict[str, int] | None = None,
    ) -> str:
        entry: dict[str, Any] = {
            "request_id": request_id,
            "event": event,
            "scope": scope,
            "scope_hash": ids.tag(scope_id),
            "at": now,
        }
        if requester:
            entry["requester"] = requester
        if removed is not None:
            entry["removed"] = removed
        return json.dumps(entry, sort_keys=True)

    async def _episodes_of(self, tenant: str) -> list[str]:
        prefix = self.keys.node(tenant, "")
        match = f"{prefix}{ids.kind_prefix(NodeKind.EPISODE)}_*"
        return [
            as_text(k)[len(prefix) :]
            async for k in cluster.scan_keys(self.redis, match, near=self.keys.degrees(tenant))
        ]

    async def _fields(
        self, tenant: str, node_ids: list[str], names: tuple[str, ...]
    ) -> list[tuple[str, ...]]:
        out: list[tuple[str, ...]] = []
        for i in range(0, len(node_ids), 1000):
            pipe = self.redis.pipeline(transaction=False)
            for n in node_ids[i : i + 1000]:
                pipe.hmget(self.keys.node(tenant, n), names)
            for row in await pipe.execute():
                out.append(tuple(as_text(v) for v in row))
        return out

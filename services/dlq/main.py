"""``gaama dlq list|show|replay``: read the dead-letter topics and replay what they hold.

``python -m services.dlq.main ...`` (``gaama dlq`` runs it). Reads ``<prefix><topic>.dlq`` with
the services' own Kafka settings (``GAAMA_KAFKA__*``), without a consumer group: reading
commits nothing and moves no one's offsets.

- ``list``: one line per dead letter (its own topic/partition/offset, when, the source record's
  topic[partition]@offset, the reason, the service, the error).
- ``show TOPIC/PARTITION/OFFSET``: one dead letter in full, the original value decoded.
- ``replay``: republishes the *original* record — its key, value and headers, read back from the
  source topic while it retains it, else the envelope's copy — to its source topic and
  partition, with the header ``gaama-replay-of: <topic>/<partition>/<offset>``. Each source
  record is replayed at most once: a Redis marker (``<prefix>:dlq:replayed:<topic>/<p>/<o>``),
  written once the broker acknowledged the record, makes a second replay a no-op.
  ``--dry-run`` prints what it would publish and publishes nothing.

Filters: ``--topic`` (the source topics' logical names, default every pipeline topic),
``--reason`` (repeatable), ``--since`` (``2026-05-01T10:00``, ``90m``, ``6h``, ``2d``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import re
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import ValidationError as PydanticValidationError
from redis.exceptions import RedisError

from gaama.config import Settings, load_settings
from gaama.errors import BrokerUnavailable, ConfigError, GaamaError, StoreUnavailable
from gaama.events import TOPICS, DeadLetter, decode, dlq, topic_name
from gaama.store import connect
from services.runtime.kafka import client_options

#: The header a replayed record carries: the source record it repeats.
REPLAY_HEADER = "gaama-replay-of"
#: How long a replay marker is kept: a replay after that republishes again, which the
#: pipeline's idempotent writes absorb.
MARKER_TTL_S = 90 * 24 * 3600
#: Reasons whose letter holds no record to replay (a raw record batch).
NOT_REPLAYABLE = {"undecodable"}
#: How long a read waits for the next record before taking the partition as read to its end.
POLL_MS = 1000
PROGRESS_EVERY_S = 5.0

Header = tuple[str, bytes]


@dataclass(frozen=True)
class Letter:
    """A dead letter and where it sits in its DLQ topic."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    letter: DeadLetter

    @property
    def coords(self) -> str:
        return f"{self.topic}/{self.partition}/{self.offset}"

    @property
    def source(self) -> str:
        """The replay identity: the source record's ``topic/partition/offset``."""
        d = self.letter
        return f"{d.source_topic}/{d.partition}/{d.offset}"


@dataclass(frozen=True)
class Original:
    key: bytes | None
    value: bytes
    headers: list[Header]
    from_source: bool  # read back from the source topic (else the envelope's copy)


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """An ISO time (UTC when it names no zone) or an age: ``90s``, ``30m``, ``6h``, ``2d``."""
    now = now or datetime.now(UTC)
    m = re.fullmatch(r"(\d+)([smhd])", text.strip())
    if m:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[m.group(2)]
        return now - timedelta(**{unit: int(m.group(1))})
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"--since {text!r}: give an ISO time (2026-05-01T10:00) or an age (90m, 6h, 2d)"
        ) from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def dlq_topics(settings: Settings, topics: Sequence[str] | None) -> list[str]:
    """The DLQ topics to read, prefixed: ``--topic`` takes a source topic's logical name (with
    or without ``.dlq``)."""
    bases = list(topics) if topics else list(TOPICS)
    out = []
    for base in bases:
        base = base.removesuffix(".dlq")
        if base not in TOPICS:
            raise ConfigError(
                f"--topic {base!r}: not a pipeline topic (one of {', '.join(TOPICS)})"
            )
        out.append(topic_name(dlq(base), settings.topic_prefix))
    return out


def marker_key(settings: Settings, source: str) -> str:
    return f"{settings.key_prefix}:dlq:replayed:{source}"


class Tools:
    def __init__(self, settings: Settings, out: Any = None, err: Any = None) -> None:
        self.settings = settings
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    def _consumer(self) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            bootstrap_servers=self.settings.kafka_bootstrap_servers,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            **client_options(self.settings.kafka),
        )

    async def _started(self, client: Any) -> None:
        try:
            await asyncio.wait_for(client.start(), 30)
        except (KafkaError, OSError, TimeoutError) as exc:
            await client.stop()
            raise BrokerUnavailable(
                f"broker unreachable at {self.settings.kafka_bootstrap}: {exc!r}"
            ) from None

    async def letters(
        self, topics: Sequence[str], since: datetime | None = None
    ) -> AsyncIterator[Letter]:
        """Every dead letter of ``topics`` (from ``since``, by the DLQ record's time), up to the
        end each partition had when the read began."""
        consumer = self._consumer()
        await self._started(consumer)
        try:
            await consumer.topics()  # metadata: partitions are unknown until then
            tps = [
                TopicPartition(t, p)
                for t in topics
                for p in sorted(consumer.partitions_for_topic(t) or ())
            ]
            if not tps:
                return
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            starts: dict[TopicPartition, int] = {tp: 0 for tp in tps}
            if since is not None:
                found = await consumer.offsets_for_times(
                    {tp: int(since.timestamp() * 1000) for tp in tps}
                )
                for tp in tps:
                    at = found.get(tp)
                    starts[tp] = at.offset if at is not None else ends[tp]
            else:
                for tp, first in (await consumer.beginning_offsets(tps)).items():
                    starts[tp] = first
            todo = {tp for tp in tps if starts[tp] < ends[tp]}
            for tp in tps:
                consumer.seek(tp, starts[tp])
            while todo:
                batch = await consumer.getmany(*todo, timeout_ms=POLL_MS)
                if not batch:
                    break  # nothing more within the poll: the rest is gone (retention)
                for tp, msgs in batch.items():
                    for m in msgs:
                        if m.offset >= ends[tp]:
                            todo.discard(tp)
                            break
                        letter = self._decode(tp, m)
                        if letter is not None:
                            yield letter
                        if m.offset + 1 >= ends[tp]:
                            todo.discard(tp)
        finally:
            await consumer.stop()

    def _decode(self, tp: TopicPartition, m: Any) -> Letter | None:
        try:
            d = decode(DeadLetter, m.value)
        except (GaamaError, PydanticValidationError, ValueError) as exc:
            print(f"{tp.topic}/{tp.partition}/{m.offset}: not a dead letter: {exc}", file=self.err)
            return None
        return Letter(tp.topic, tp.partition, m.offset, m.timestamp, d)

    async def selected(self, args: argparse.Namespace) -> AsyncIterator[Letter]:
        since = parse_since(args.since) if args.since else None
        reasons = set(args.reason or ())
        async for item in self.letters(dlq_topics(self.settings, args.topic), since):
            if reasons and item.letter.reason not in reasons:
                continue
            if since is not None and item.letter.failed_at < since:
                continue
            yield item

    # --- list / show ------------------------------------------------------------------------

    async def list(self, args: argparse.Namespace) -> int:
        n = 0
        async for item in self.selected(args):
            d = item.letter
            error = d.error.replace("\n", " ")
            error = error if len(error) <= 100 else error[:99] + "…"
            print(
                f"{item.coords}  {d.failed_at.isoformat(timespec='seconds')}  "
                f"{d.source_topic}[{d.partition}]@{d.offset}  {d.reason}  {d.service}  {error}",
                file=self.out,
            )
            n += 1
        print(f"{n} dead letter(s)", file=self.err)
        return 0

    async def show(self, args: argparse.Namespace) -> int:
        topic, partition, offset = parse_coords(args.letter)
        async for item in self.letters([topic]):
            if item.partition == partition and item.offset == offset:
                d = item.letter
                body: dict[str, Any] = d.model_dump(mode="json", exclude={"value_b64"})
                body["dlq"] = item.coords
                body["value"] = readable(d.original_value())
                print(json.dumps(body, indent=2, ensure_ascii=False), file=self.out)
                return 0
        raise ConfigError(f"no dead letter at {args.letter} (gaama dlq list shows them)")

    # --- replay -----------------------------------------------------------------------------

    async def original(self, consumer: AIOKafkaConsumer, item: Letter) -> Original | None:
        """The source record (key, value, headers), else the envelope's copy; None when neither
        holds it whole."""
        d = item.letter
        if d.partition is not None and d.offset is not None:
            tp = TopicPartition(d.source_topic, d.partition)
            if tp not in consumer.assignment():
                consumer.assign([*consumer.assignment(), tp])
            consumer.seek(tp, d.offset)
            batch = await consumer.getmany(tp, timeout_ms=POLL_MS, max_records=1)
            for m in batch.get(tp, ()):
                if m.offset == d.offset:
                    headers = [(k, bytes(v)) for k, v in (m.headers or ()) if k != REPLAY_HEADER]
                    return Original(m.key, m.value, headers, True)
        if d.value_truncated:
            return None
        key = d.key.encode("utf-8") if d.key is not None else None
        return Original(key, d.original_value(), [], False)

    async def replay(self, args: argparse.Namespace) -> int:
        s = self.settings
        redis = connect(s.redis_url, cluster=s.redis_cluster, auth=s.redis, socket_timeout=10)
        reader = self._consumer()
        producer = None
        counts = {"replayed": 0, "skipped": 0, "failed": 0}
        seen = 0
        last = time.monotonic()
        try:
            await self._started(reader)
            if not args.dry_run:
                producer = AIOKafkaProducer(
                    bootstrap_servers=s.kafka_bootstrap_servers,
                    acks="all",
                    **client_options(s.kafka),
                )
                await self._started(producer)
            async for item in self.selected(args):
                seen += 1
                outcome = await self._replay_one(item, reader, producer, redis)
                counts[outcome] += 1
                if time.monotonic() - last >= PROGRESS_EVERY_S:
                    last = time.monotonic()
                    print(f"… {seen} read, {_summary(counts)}", file=self.err)
        finally:
            await reader.stop()
            if producer is not None:
                await producer.stop()
            await redis.aclose()
        verb = "would replay" if args.dry_run else "replayed"
        print(
            f"{seen} dead letter(s): {verb} {counts['replayed']}, skipped {counts['skipped']}, "
            f"failed {counts['failed']}",
            file=self.err,
        )
        return 1 if counts["failed"] else 0

    async def _replay_one(
        self,
        item: Letter,
        reader: AIOKafkaConsumer,
        producer: AIOKafkaProducer | None,
        redis: Any,
    ) -> str:
        d, source = item.letter, item.source
        if d.reason in NOT_REPLAYABLE:
            print(f"skip {source}: {d.reason}: a raw record batch, not a record", file=self.out)
            return "skipped"
        if d.partition is None or d.offset is None:
            print(f"skip {source}: the letter names no source offset", file=self.out)
            return "skipped"
        try:
            done = await redis.get(marker_key(self.settings, source))
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"Redis unavailable (replay markers): {exc}") from None
        if done is not None:
            print(f"skip {source}: already replayed ({_text(done)})", file=self.out)
            return "skipped"
        original = await self.original(reader, item)
        if original is None:
            print(
                f"fail {source}: the letter holds a truncated value and the source topic no "
                "longer has the record",
                file=self.err,
            )
            return "failed"
        headers = [*original.headers, (REPLAY_HEADER, source.encode())]
        where = f"{d.source_topic}[{d.partition}]"
        what = (
            f"key={_text(original.key)} {len(original.value)} bytes, "
            f"{len(original.headers)} header(s), from "
            f"{'the source topic' if original.from_source else 'the dead letter'}"
        )
        if producer is None:
            print(f"would replay {source} -> {where} {what}", file=self.out)
            return "replayed"
        try:
            meta = await producer.send_and_wait(
                d.source_topic,
                value=original.value,
                key=original.key,
                partition=d.partition,
                headers=headers,
            )
        except KafkaError as exc:
            print(f"fail {source}: the broker refused it: {exc!r}", file=self.err)
            return "failed"
        # Marked once the broker has it: a crash before the mark replays again, harmlessly.
        note = f"{datetime.now(UTC).isoformat(timespec='seconds')} as {where}@{meta.offset}"
        try:
            await redis.set(marker_key(self.settings, source), note, ex=MARKER_TTL_S)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"Redis unavailable (replay markers): {exc}") from None
        print(f"replayed {source} -> {where}@{meta.offset} {what}", file=self.out)
        return "replayed"


def parse_coords(text: str) -> tuple[str, int, int]:
    topic, _, rest = text.rpartition("/")
    topic, _, partition = topic.rpartition("/")
    try:
        return topic, int(partition), int(rest)
    except ValueError:
        raise ConfigError(
            f"{text!r}: name a dead letter as TOPIC/PARTITION/OFFSET (as gaama dlq list prints)"
        ) from None


def readable(value: bytes) -> Any:
    """A value as JSON when it is JSON, else text, else base64."""
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}
    try:
        return json.loads(text)
    except ValueError:
        return text


def _text(value: bytes | str | None) -> str:
    if value is None:
        return "-"
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _summary(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gaama dlq", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="action", required=True)

    def filters(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--topic",
            action="append",
            help=f"a source topic's logical name (repeatable; default: {', '.join(TOPICS)})",
        )
        q.add_argument("--reason", action="append", help="only this reason (repeatable)")
        q.add_argument("--since", help="only letters from then: an ISO time or 90m, 6h, 2d")

    filters(sub.add_parser("list", help="one line per dead letter"))
    show = sub.add_parser("show", help="one dead letter in full, its value decoded")
    show.add_argument("letter", help="TOPIC/PARTITION/OFFSET of the dead letter (from list)")
    replay = sub.add_parser(
        "replay", help="republish the original records to their topics, each at most once"
    )
    filters(replay)
    replay.add_argument("--dry-run", action="store_true", help="print, publish nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
        if getattr(args, "since", None):
            parse_since(args.since)
        if args.action != "show":
            dlq_topics(settings, args.topic)
        tools = Tools(settings)
        action = {"list": tools.list, "show": tools.show, "replay": tools.replay}[args.action]
        return asyncio.run(action(args))
    except GaamaError as exc:
        print(f"gaama dlq: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

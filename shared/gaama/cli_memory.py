"""``gaama forget …``, ``gaama memories``, ``gaama export …``, ``gaama audit``: data subject
requests against a running query service, as the tenant of ``GAAMA_API_KEY``; ``gaama context
…``: the prompt-ready context block for a query.

The service is ``--url`` (default ``GAAMA_QUERY_URL``, else the dev stack's query service).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from gaama.errors import ConfigError


def _client(args: argparse.Namespace) -> Any:
    from gaama.client import GaamaClient

    key = os.environ.get("GAAMA_API_KEY", "")
    if not key:
        raise ConfigError("GAAMA_API_KEY: set it to the tenant's API key")
    url = args.url or os.environ.get("GAAMA_QUERY_URL") or "http://127.0.0.1:8084"
    return GaamaClient(url, key)


def _forget(args: argparse.Namespace) -> int:
    with _client(args) as c:
        if args.scope == "tenant":
            admin = os.environ.get("GAAMA_ADMIN_KEY", "")
            if not admin:
                raise ConfigError("GAAMA_ADMIN_KEY: forgetting a tenant needs an admin key")
            rid = c.forget_tenant(admin)
        else:
            if not args.id:
                raise ConfigError(f"gaama forget {args.scope} needs the {args.scope}'s id")
            forget = c.forget_conversation if args.scope == "conversation" else c.forget_subject
            rid = forget(args.id)
        print(f"# forget request {rid} accepted; the scope is hidden from reads", file=sys.stderr)
        status = c.forget_status(rid)
        deadline = time.monotonic() + args.wait
        while args.wait and status["status"] != "done" and time.monotonic() < deadline:
            time.sleep(0.5)
            status = c.forget_status(rid)
        print(json.dumps(status))
    return 0 if not args.wait or status["status"] == "done" else 1


def _memories(args: argparse.Namespace) -> int:
    with _client(args) as c:
        cursor = None
        while True:
            page = c.memories(
                conversation=args.conversation, subject=args.subject, kind=args.kind, cursor=cursor
            )
            for item in page["items"]:
                print(json.dumps(item, ensure_ascii=False))
            cursor = page.get("next_cursor")
            if not cursor:
                return 0


def _export(args: argparse.Namespace) -> int:
    with _client(args) as c:
        n = 0
        for line in c.export(args.subject):
            print(json.dumps(line, ensure_ascii=False))
            n += 1
        print(f"# {n} records", file=sys.stderr)
    return 0


def _audit(args: argparse.Namespace) -> int:
    with _client(args) as c:
        for entry in c.audit(args.limit):
            print(json.dumps(entry))
    return 0


def _context(args: argparse.Namespace) -> int:
    with _client(args) as c:
        out = c.get_context(
            args.query,
            max_tokens=args.max_tokens,
            subject=args.subject,
            conversation=args.conversation,
            as_of=args.as_of,
        )
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        print(out["context"])
        print(f"# {out['tokens']} tokens, {len(out['items'])} items", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--url", default=None, help="the query service (GAAMA_QUERY_URL)")

    f = sub.add_parser("forget", help="forget a conversation, a subject or the tenant")
    f.add_argument("scope", choices=["conversation", "subject", "tenant"])
    f.add_argument("id", nargs="?", default="", help="the conversation or subject id")
    f.add_argument("--wait", type=float, default=60.0, help="seconds to wait for done (0: none)")
    common(f)
    f.set_defaults(func=_forget)

    m = sub.add_parser("memories", help="list the tenant's memory as JSON lines")
    m.add_argument("--conversation")
    m.add_argument("--subject")
    m.add_argument("--kind", choices=["episode", "fact", "reflection", "concept"])
    common(m)
    m.set_defaults(func=_memories)

    e = sub.add_parser("export", help="every node and edge about a subject, as JSON lines")
    e.add_argument("subject")
    common(e)
    e.set_defaults(func=_export)

    a = sub.add_parser("audit", help="the tenant's forget audit log")
    a.add_argument("--limit", type=int, default=100)
    common(a)
    a.set_defaults(func=_audit)

    c = sub.add_parser("context", help="the prompt-ready memory block for a query")
    c.add_argument("query")
    c.add_argument("--max-tokens", type=int, default=1000, help="token budget of the block")
    c.add_argument("--conversation")
    c.add_argument("--subject")
    c.add_argument("--as-of", type=float, default=None, help="epoch seconds: memory as then")
    c.add_argument("--json", action="store_true", help="the whole response as JSON")
    common(c)
    c.set_defaults(func=_context)

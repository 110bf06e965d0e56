"""What the expansion script's parts cost Redis, and whether a cheaper neighbour sort pays: variants
of ``store/lua/expand.lua`` timed on the calls real searches make.

    PYTHONPATH=shared:. python scripts/expand-script-ab.py [nodes] [rounds]

First it loads a synthetic tenant (``benchmarks.synthetic``) on a Redis of its own. It runs 200
searches and keeps the arguments of their expansion calls. Then it loads each variant as a
script and runs all 200 calls four times per round. The rounds alternate the variants' order.
Redis's own time per call (``INFO commandstats``) is printed for each round, with the median.
Each variant's replies are compared with the script's own:

- ``bucket``: the same order of admission (heaviest walk weight first, ties by id). It groups
  the neighbours by walk weight and sorts each group with Lua's built-in comparison instead of
  a Lua comparator. Its replies must be identical.
- ``nosort``, ``noedges``, ``nofinaldeg``, ``noreply``, ``noahead``, ``aheadunsent``:
  ablations, not candidates. Each leaves a part out (the neighbour sort, the edge pass, the final
  degree read, the reply's contents, the read-ahead, the read-ahead's rows in the reply while
  its reads stay), so its time shows that part's cost. Their replies differ by design.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks import inprocess
from gaama.devstack import processes

SCRIPT = Path(__file__).resolve().parents[1] / "shared" / "gaama" / "store" / "lua" / "expand.lua"

_BY_WEIGHT = """-- A node's new neighbours in admission order: heaviest walk weight first, ties by
-- id, grouped by weight and each group sorted with the built-in comparison.
local function by_weight(flat)
  local groups, ws, nw = {}, {}, 0
  for j = 1, #flat, 2 do
    local v = flat[j]
    if not index[v] then
      local w = walk(flat[j + 1])
      local g = groups[w]
      if g == nil then g = {}; groups[w] = g; nw = nw + 1; ws[nw] = w end
      g[#g + 1] = v
    end
  end
  if nw == 1 then
    local g = groups[ws[1]]
    if #g > 1 then table.sort(g) end
    return g
  end
  if nw > 1 then table.sort(ws, function(a, b) return a > b end) end
  local out, n = {}, 0
  for k = 1, nw do
    local g = groups[ws[k]]
    if #g > 1 then table.sort(g) end
    for i = 1, #g do n = n + 1; out[n] = g[i] end
  end
  return out
end
"""
_NEIGHBOURS = """      local nbs, nn = {}, 0
      for j = 1, #flat, 2 do
        local v = flat[j]
        if not index[v] then nn = nn + 1; nbs[nn] = v; nw[v] = walk(flat[j + 1]) end
      end
      if nn > 1 then table.sort(nbs, heavier) end
      for i = 1, nn do"""


def edit(source: str, old: str, new: str) -> str:
    if source.count(old) != 1:
        raise SystemExit(f"expand.lua changed: {old[:60]!r} not found once; update this probe")
    return source.replace(old, new)


def variants(source: str) -> dict[str, str]:
    comparator = source[source.index("local nw = {}") : source.index("local nodes, index = {}, {}")]
    bucket = edit(source, comparator, "")
    bucket = edit(bucket, "local nodes, index = {}, {}\n", "")
    bucket = edit(
        bucket,
        "local scoped = conv ~= '' or subj ~= ''",
        "local nodes, index = {}, {}\n" + _BY_WEIGHT + "local scoped = conv ~= '' or subj ~= ''",
    )
    bucket = edit(
        bucket, _NEIGHBOURS, "      local nbs = by_weight(flat)\n      for i = 1, #nbs do"
    )
    final = "load_degrees(nodes)\n"
    return {
        "expand.lua": source,
        "bucket": bucket,
        "nosort": edit(source, "      if nn > 1 then table.sort(nbs, heavier) end\n", ""),
        "noedges": edit(
            source, "for r = 1, nread do\n  local flat, iu", "for r = 1, 0 do\n  local flat, iu"
        ),
        "nofinaldeg": edit(
            edit(source, final, ""),
            "degrees[i] = degree[nodes[i]] end",
            "degrees[i] = degree[nodes[i]] or 0 end",
        ),
        "noreply": edit(
            source,
            "return {table.concat(nodes, ',', 1, count), packed('i4', degrees, count), "
            "packed('d', out, no), ahead}",
            "return {'', '', '', {}}",
        ),
        "noahead": edit(
            source,
            "local want, ahead, na = num(ARGV[12]), {}, 0",
            "local want, ahead, na = 0, {}, 0",
        ),
        "aheadunsent": edit(
            source,
            "        ahead[na + 1] = v\n"
            "        for k = 1, nf do ahead[na + 1 + k] = row[k] end\n"
            "        na = na + 1 + nf\n",
            "",
        ),
    }


async def capture(url: str, nodes: int, searches: int) -> list[tuple[list[str], list[Any]]]:
    loaded = await inprocess.searches(url, "ab", nodes, searches)
    calls: list[tuple[list[str], list[Any]]] = []
    script = loaded.graph._expand

    async def keep(keys: list[str], args: list[Any]) -> Any:
        calls.append((list(keys), list(args)))
        return await script(keys=keys, args=args)

    loaded.graph._expand = keep  # type: ignore[method-assign]
    for text in loaded.texts:
        await loaded.retriever.search(loaded.tenant, text)
    await loaded.client.aclose()
    return calls


async def measure(url: str, nodes: int, rounds: int) -> None:
    import redis.asyncio as aioredis

    calls = await capture(url, nodes, 200)
    client = aioredis.from_url(url)
    shas = {n: await client.script_load(src) for n, src in variants(SCRIPT.read_text()).items()}
    replies = {
        n: [await client.evalsha(sha, len(k), *k, *a) for k, a in calls] for n, sha in shas.items()
    }
    print(f"{nodes:,} nodes, {len(calls)} expansion calls of real searches, 4 passes per round")
    for name, got in replies.items():
        print(f"  {name:11s} replies identical to expand.lua's: {got == replies['expand.lua']}")
    times: dict[str, list[float]] = {n: [] for n in shas}
    for r in range(rounds):
        for name in list(shas) if r % 2 == 0 else list(shas)[::-1]:
            await client.config_resetstat()
            for _ in range(4):
                for keys, args in calls:
                    await client.evalsha(shas[name], len(keys), *keys, *args)
            stats = (await client.info("commandstats"))["cmdstat_evalsha"]
            times[name].append(stats["usec"] / stats["calls"])
    for name, us in times.items():
        rounds_text = " ".join(f"{u:.0f}" for u in us)
        print(
            f"  {name:11s} µs per call in Redis: median {statistics.median(us):.0f} ({rounds_text})"
        )
    await client.aclose()


def main() -> None:
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    with processes.temporary_redis("gaama-expand-ab-") as url:
        asyncio.run(measure(url, nodes, rounds))


if __name__ == "__main__":
    main()

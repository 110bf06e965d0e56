"""The Redis key layout. Only the store modules know it.

Every key of a tenant carries the tenant as a cluster hash tag, so one tenant's keys share a slot
(multi-key transactions and Lua scripts stay legal on Redis Cluster)::

    <p>:node:{<tenant>}:<id>          hash: the node (and, for the vector index, its embedding)
    <p>:adj:{<tenant>}:<id>           hash: neighbour id -> the edge kind's letter (upper case
                                      at the source, lower at the target) and its weight if
                                      not 1 (store/codecs.py; "KIND|o|w" before, still read)
    <p>:deg:{<tenant>}                hash: node id -> its degree (adjacency size), rewritten in
                                      the same transaction as every adjacency write
    <p>:chain:{<tenant>}:<conv>       zset: episode ids of a conversation scored by position
    <p>:state:{<tenant>}:<name>       pipeline state (open chunks, dedupe markers)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    prefix: str = "gaama"

    @property
    def node_prefix(self) -> str:
        """The vector index covers exactly the keys starting with this."""
        return f"{self.prefix}:node:"

    def node(self, tenant: str, node_id: str) -> str:
        return f"{self.prefix}:node:{{{tenant}}}:{node_id}"

    def adj(self, tenant: str, node_id: str) -> str:
        return f"{self.prefix}:adj:{{{tenant}}}:{node_id}"

    def adj_prefix(self, tenant: str) -> str:
        return f"{self.prefix}:adj:{{{tenant}}}:"

    def degrees(self, tenant: str) -> str:
        return f"{self.prefix}:deg:{{{tenant}}}"

    def chain(self, tenant: str, conversation: str) -> str:
        return f"{self.prefix}:chain:{{{tenant}}}:{conversation}"

    def state(self, tenant: str, *name: str) -> str:
        return f"{self.prefix}:state:{{{tenant}}}:" + ":".join(name)

    def text_version(self, tenant: str) -> str:
        """A token every write of the tenant's nodes replaces (store/fulltext.py's counts)."""
        return self.state(tenant, "textver")

    @property
    def durability_marker(self) -> str:
        """Written before each WAITAOF (store/durability.py); not a tenant's key."""
        return f"{self.prefix}:durability"

    def tenant_patterns(self, tenant: str) -> list[str]:
        return [
            *(f"{self.prefix}:{kind}:{{{tenant}}}:*" for kind in ("node", "adj", "chain", "state")),
            self.degrees(tenant),
        ]

    def id_from_node_key(self, key: str) -> str:
        return key.rsplit(":", 1)[1]

"""The vector index's layout and how to read the Query Engine's replies: the schema
(:func:`index_schema`), the checks of an existing index's ``FT.INFO`` (exact tags, the vector
field's type, the full-text field, the dimension: :func:`check_info`), the tenant and scope filter
of every search (:func:`scope_filter`), the parsing of ``FT.SEARCH`` replies in either protocol,
and the KNN's hybrid policy (:func:`hybrid_policy`). Pure functions; :mod:`gaama.store.vectors`
and :mod:`gaama.store.index_reads` run the commands.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError
from redisvl.query.filter import FilterExpression, Tag
from redisvl.schema import IndexSchema

from gaama import ids
from gaama.errors import ConfigError, DimensionMismatch
from gaama.model import NodeKind
from gaama.store.codecs import TAG_FIELDS, VECTOR_DTYPE, VECTOR_FIELD, as_text
from gaama.store.keys import Keys
from gaama.store.validity import VALIDITY_INDEXED

#: HNSW links per node (a node of the bottom layer has twice as many).
HNSW_M = 16
#: What examining one HNSW candidate costs, in brute-force comparisons of one vector, as the
#: client sees it (a search's fixed cost included) with the candidates counted as
#: :func:`hybrid_policy` counts them (docs/decisions/0002-knn-hybrid-policy.md).
HNSW_CANDIDATE_COST = 16
#: HNSW's answer is approximate and brute force's exact, so HNSW runs only when it at least halves
#: the cost: a saving smaller than that is not worth the recall it gives up
#: (docs/decisions/0002-knn-hybrid-policy.md).
HNSW_MIN_SAVING = 2


def hybrid_policy(tenant_nodes: int, index_docs: int, k: int, ef: int) -> str:
    """How a KNN over one tenant's nodes of a shared index runs: ``"BATCHES"`` (walk the HNSW
    graph, keeping the tenant's nodes, until k are found) or ``"ADHOC_BF"`` (compare the query
    with every node of the tenant; exact).

    Brute force makes ``tenant_nodes`` comparisons. An HNSW search examines about ``ef``
    candidates to start with, plus k ÷ (the tenant's share of the ``index_docs``, or of an upper
    bound of them) to collect k of the tenant's nodes, each costing :data:`HNSW_CANDIDATE_COST`
    comparisons. HNSW runs when it costs at most 1 / :data:`HNSW_MIN_SAVING` of brute force:
    small tenants (and any tenant that is a sliver of a large index) are brute-forced, large ones
    walk HNSW. The Query Engine's own rule is not used: it weighs the share and the index's size,
    not what brute force over the tenant costs, and so brute-forces a large tenant of a shared
    index that HNSW would serve far more cheaply.
    """
    candidates = ef + k * index_docs / max(tenant_nodes, 1)
    hnsw = HNSW_CANDIDATE_COST * candidates
    return "BATCHES" if HNSW_MIN_SAVING * hnsw <= tenant_nodes else "ADHOC_BF"


#: The node field indexed for full text (the lexical channel of retrieval).
LEXICAL_FIELD = "text"
#: Options of the index as a whole, which FT.ALTER cannot change afterwards. ``NOOFFSETS``: no
#: term positions are kept, which no search of ours reads (the lexical channel matches single
#: words, with no phrase, slop or highlighting); ``NOFIELDS``: no per-term mask of the TEXT
#: fields holding it, since :data:`LEXICAL_FIELD` is the only one (a second TEXT field would
#: need the mask back for ``@text:`` to mean that field alone). Term frequencies stay: the
#: lexical channel's DISMAX scores are them (:mod:`gaama.store.fulltext`).
INDEX_OPTIONS = ("NOOFFSETS", "NOFIELDS")


def index_schema(name: str, keys: Keys, dim: int) -> IndexSchema:
    return IndexSchema.from_dict(
        {
            "index": {
                "name": name,
                "prefix": keys.node_prefix,
                "storage_type": "hash",
                "key_separator": ":",
            },
            "fields": [
                *(
                    {"name": f, "type": "tag", "attrs": {"case_sensitive": True}}
                    for f in TAG_FIELDS.values()
                ),
                {"name": "kind", "type": "tag", "attrs": {"case_sensitive": True}},
                {"name": "time", "type": "numeric"},
                # a fact's validity (gaama.store.validity): absent while it holds
                *({"name": f, "type": "numeric"} for f in VALIDITY_INDEXED),
                {"name": LEXICAL_FIELD, "type": "text"},
                {
                    "name": VECTOR_FIELD,
                    "type": "vector",
                    "attrs": {
                        "algorithm": "hnsw",
                        "dims": dim,
                        "distance_metric": "cosine",
                        "datatype": VECTOR_DTYPE.__name__,
                        "m": HNSW_M,
                        "ef_construction": 200,
                    },
                },
            ],
        }
    )


def create_args(schema: IndexSchema) -> list[Any]:
    """``FT.CREATE``'s arguments after the index name: RedisVL's fields with
    :data:`INDEX_OPTIONS`, which RedisVL does not pass."""
    args: list[Any] = ["ON", "HASH", "PREFIX", 1, schema.index.prefix, *INDEX_OPTIONS, "SCHEMA"]
    for f in schema.redis_fields:
        args += f.redis_args()
    return args


def has_index_options(info: Any) -> bool:
    """Whether an FT.INFO reply shows every one of :data:`INDEX_OPTIONS`."""
    top = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2], strict=False))
    found = top.get(b"index_options", top.get("index_options")) or []
    return {as_text(o).upper() for o in found} >= set(INDEX_OPTIONS)


def has_text_field(info: Any) -> bool:
    """Whether an FT.INFO reply shows the full-text field of the lexical channel."""

    def is_text_attr(x: Any) -> bool:
        flat = [as_text(v) for v in x if isinstance(v, bytes | str)]
        pairs = dict(zip(flat[::2], flat[1::2], strict=False))
        return pairs.get("identifier") == LEXICAL_FIELD and pairs.get("type") == "TEXT"

    def walk(x: Any) -> bool:
        if isinstance(x, dict):
            x = [v for kv in x.items() for v in kv]
        if isinstance(x, list | tuple):
            return is_text_attr(x) or any(walk(item) for item in x)
        return False

    return walk(info)


def has_exact_tags(info: Any) -> bool:
    """Whether an FT.INFO reply shows the digest tag fields of the current layout."""
    wanted = {f.encode() for f in TAG_FIELDS.values()} | set(TAG_FIELDS.values())
    found: set[Any] = set()

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            x = [v for kv in x.items() for v in kv]
        if isinstance(x, list | tuple):
            for item in x:
                if isinstance(item, bytes | str) and item in wanted:
                    found.add(item if isinstance(item, str) else item.decode())
                else:
                    walk(item)

    walk(info)
    return found >= set(TAG_FIELDS.values())


def vector_attribute(info: Any) -> dict[str, str]:
    """The vector field's attributes in an FT.INFO reply (``identifier``, ``data_type``, ``dim``,
    ..., names in lower case), whichever protocol; empty if the index has no vector field."""
    found: dict[str, str] = {}

    def walk(x: Any) -> None:
        if found:
            return
        if isinstance(x, dict):
            x = [v for kv in x.items() for v in kv]
        if not isinstance(x, list | tuple):
            return
        pairs = [(x[i], x[i + 1]) for i in range(0, len(x) - 1, 2)]
        if len(x) % 2 == 0 and all(isinstance(k, bytes | str) for k, _ in pairs):
            attrs = {
                as_text(k).lower(): as_text(v)
                for k, v in pairs
                if not isinstance(v, list | tuple | dict)
            }
            if attrs.get("type", "").upper() == "VECTOR":
                found.update(attrs)
                return
        for item in x:
            walk(item)

    walk(info)
    return found


def has_current_vectors(info: Any) -> bool:
    """Whether an FT.INFO reply shows this layout's vector field: :data:`VECTOR_FIELD`, float16."""
    vector = vector_attribute(info)
    return (
        vector.get("identifier") == VECTOR_FIELD
        and vector.get("data_type", "").lower() == VECTOR_DTYPE.__name__
    )


def check_info(info: Any, name: str, dim: int) -> None:
    """Check that the index ``name``, whose ``FT.INFO`` reply is ``info`` (or the error it
    gave), is one this code can search with ``dim``-d vectors.

    Raises:
        ConfigError: the index predates exact tags, the current vector field or the
            full-text field (each names the ``gaama migrate`` command that upgrades it).
        DimensionMismatch: the index holds vectors of another dimension.
    """
    if isinstance(info, ResponseError):
        raise info
    if not has_exact_tags(info):
        raise ConfigError(
            f"index {name!r} uses the old tag layout, which matches tenants, "
            f"conversations and subjects case-insensitively; stop the writers and run "
            f"'gaama migrate index' (docs/operations.md, 'Upgrades')"
        )
    vector = vector_attribute(info)
    if not has_current_vectors(info):
        raise ConfigError(
            f"index {name!r} indexes {vector.get('data_type', 'no')} vectors in "
            f"{vector.get('identifier', 'no field')!r}, not {VECTOR_DTYPE.__name__} in "
            f"{VECTOR_FIELD!r}; run 'gaama migrate vectors' (docs/operations.md, "
            f"'Index schema changes')"
        )
    if not has_text_field(info):
        raise ConfigError(
            f"index {name!r} has no full-text field {LEXICAL_FIELD!r} for the lexical "
            f"channel; run 'gaama migrate index' (docs/operations.md, 'Upgrades')"
        )
    found = int(vector["dim"]) if vector.get("dim", "").isdigit() else None
    if found is not None and found != dim:
        raise DimensionMismatch(
            f"index {name!r} holds {found}-d vectors but the embedder gives {dim}-d;"
            f" set GAAMA_INDEX_NAME to a new index or use the matching embedder"
        )


def documents(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """(key, fields) of each document of an FT.SEARCH reply, in either protocol: RESP3 gives a
    map, RESP2 ``[total, key, [field, value, ...], ...]``."""
    if isinstance(reply, dict):
        rows: list[dict[Any, Any]] = reply.get(b"results") or reply.get("results") or []
        out = []
        for row in rows:
            row = {as_text(k): v for k, v in row.items()}
            attrs = row.get("extra_attributes") or {}
            out.append((as_text(row["id"]), {as_text(k): as_text(v) for k, v in attrs.items()}))
        return out
    return [(as_text(reply[i]), pairs(reply[i + 1])) for i in range(1, len(reply) - 1, 2)]


def pairs(flat: Sequence[Any] | None) -> dict[str, str]:
    """A flat ``[field, value, ...]`` as a dict (None, as a cluster answers for a document
    outside the index name's slot, is no fields)."""
    flat = flat or []
    return {as_text(flat[j]): as_text(flat[j + 1]) for j in range(0, len(flat) - 1, 2)}


def scope_filter(
    tenant: str,
    kinds: Sequence[NodeKind] | None,
    conversation: str | None,
    subject: str | None,
) -> FilterExpression:
    """The tenant (always) and scope filter of a search, on the scopes' digests."""
    flt: FilterExpression = Tag(TAG_FIELDS["tenant"]) == ids.tag(tenant)
    if kinds:
        flt = flt & (Tag("kind") == [k_.value for k_ in kinds])
    if conversation:
        flt = flt & (Tag(TAG_FIELDS["conversation"]) == ids.tag(conversation))
    if subject:
        flt = flt & (Tag(TAG_FIELDS["subject"]) == ids.tag(subject))
    return flt

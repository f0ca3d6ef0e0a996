"""Which record shard holds a job, and how shard listings merge. Pure (stdlib only).

A deployment may keep its records in several buckets (RECLAIM_SHARD_BUCKETS): each bucket
starts at about 1,000 object writes/s and ramps up on its own, so only more buckets add
capacity from cold (https://cloud.google.com/storage/docs/request-rate; docs/capacity.md).
A job's objects live in the shard a hash of its id picks, so any process finds them from
the id alone (a doorbell carries only the id). The hash is sha256, not Python's hash(),
which differs between processes.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from typing import TypeVar

_T = TypeVar("_T")

MAX_SHARDS = 64
"""More shards than this is a typo: every merged listing lists each shard once."""


def shard_of(job_id: str, count: int) -> int:
    """The shard (0..count-1) of a job id: the same in every process and on every run."""
    if count < 1:
        raise ValueError(f"shard count must be >= 1, got {count}")
    if count == 1:
        return 0
    digest = hashlib.sha256(job_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


TIME_INDEX_FANOUT = 4
"""Sub-prefixes a time-bucketed index spreads each hour or day over (shared.timing's
scheduled/, shared.features.flow_policy's ended/): every write of one hour would otherwise land in
one new key range, the hotspot the request-rate guidance describes
(https://cloud.google.com/storage/docs/request-rate). Each reader of one hour or day lists
this many prefixes (and the one of the names written before the fan-out)."""


def fanout_slot(job_id: str, fanout: int = TIME_INDEX_FANOUT) -> str:
    """The sub-prefix ("s0".."s<fanout-1>") a job's entry in a time index goes to: from
    a hash of its id, so the entry's name is the same on every write (create-only,
    idempotent). Letters, so a slot never sorts among the digits of an old time bucket."""
    if fanout < 1:
        raise ValueError(f"fan-out must be >= 1, got {fanout}")
    digest = hashlib.sha256(job_id.encode("utf-8")).digest()
    return f"s{int.from_bytes(digest[8:16], 'big') % fanout}"


NAME_HASH_CHARS = 2
"""Hex characters of a record's name segment: 256 key ranges under jobs/, so consecutive
user ids (order-1234, order-1235) land far apart in the bucket's key index."""


def name_hash(job_id: str) -> str:
    """The segment before a job's id in its record's name (jobs/<h>/<id>.json): user ids
    are often sequential, and names that follow a counter concentrate writes on one key
    range (https://cloud.google.com/storage/docs/request-rate, "Use a naming convention
    that distributes load evenly across key ranges"). From other bytes of the digest
    than shard_of, so the names spread within each shard too."""
    digest = hashlib.sha256(job_id.encode("utf-8")).digest()
    return digest[16:].hex()[:NAME_HASH_CHARS]


def fanout_slots(fanout: int = TIME_INDEX_FANOUT) -> tuple[str, ...]:
    """Every slot of a time index, in name order."""
    return tuple(sorted(f"s{k}" for k in range(fanout)))


def merge_sorted(
    listings: Sequence[Iterable[_T]], key: Callable[[_T], str], limit: int | None
) -> list[_T]:
    """The first `limit` items (all when None) of listings each sorted by key, in key order.

    Each shard answers a paged listing with at most `limit` items from the same start, so
    the first `limit` of the merge are exactly the first `limit` of the union: a page
    cursor (the last key + a successor) means the same as on one bucket.
    """
    merged = heapq.merge(*listings, key=key)
    return list(merged if limit is None else islice(merged, limit))


def check_buckets(buckets: Sequence[str]) -> tuple[str, ...]:
    """The record buckets, home first: distinct names, at most MAX_SHARDS."""
    out = tuple(buckets)
    if not out:
        raise ValueError("at least one records bucket is needed")
    if len(set(out)) != len(out):
        raise ValueError(f"record buckets repeat: {list(out)}")
    if len(out) > MAX_SHARDS:
        raise ValueError(f"at most {MAX_SHARDS} record buckets, got {len(out)}")
    return out

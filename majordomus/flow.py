"""Flow control a capability declares: concurrency per key, fairly between keys.

`@capability(..., per_key=PerKey("tenant", 2))`: at most 2 executions of the capability run
at once for each value of its input's `tenant`, across every worker. The key is a top-level
input member of a scalar type (a string, an integer, a boolean, or an enumeration of them),
not sensitive (its value is written into key names), so every start chooses its key by its
input; an input whose member is null or absent counts under the key `null`.

**How it holds, and why it is fair.** The key's slots live beside its executions: on a
Redis Cluster every execution of one (capability, key) is created in one partition (the
key picks it, as an idempotency key does), so the limit is exact across workers. A start
is *admitted* into the ready queue only while its key has a slot free (a queued admitted
one holds its slot, so a burst of 10,000 admits N); the others wait in the key's own
waiting list, out of the queue: they hold no worker slot and cost no Redis traffic while
they wait. The terminal event of one of the key's executions moves the key's next waiting
one (its oldest, by its place in line: priority, then creation) to the back of the queue.
The queue thus holds at most N of any key, so between keys the slots go round-robin: one
execution of a quiet key waits behind at most N of each busy key, never behind their
backlogs. The take checks the key's slots again (a queued one whose slot lapsed meanwhile,
a delayed one come due), and holds back what is over the limit in the same way.

**With the capability-wide `max_concurrency`**, both hold: the key admits first, then the
capability's limit runs what was admitted, oldest first; its waiting list holds at most N
of any key, so it is fair between keys too. **With priorities**, a key's waiting ones leave
it by their place in line (a `high` one before a `normal` one of the same key); between
keys the queue's order rules as always.

This module declares and computes a start's key; it names no Redis command (the slots and
lists are `majordomus.store.keys`', moved by `create.lua`, `take.lua`, `append.lua` and
`release_slot.lua`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from majordomus.search import SearchableError, check_searchable, value_text

NULL_KEY = "null"
"""The key of an input whose key member is null or absent."""


class FlowError(ValueError):
    """A flow control declared wrongly; raised at declaration (start-up)."""


@dataclass(frozen=True)
class PerKey:
    """At most `limit` executions of the capability run at once per value of the input
    member `member`, the slots going round-robin between keys (`majordomus.flow`)."""

    member: str
    limit: int

    def key_of(self, plain: Any) -> str:
        """The key of an input (its builtins form: a dict), as it is written in key names:
        `majordomus.search.value_text` of the member's value (a long one hashed)."""
        value = plain.get(self.member) if isinstance(plain, dict) else None
        text = value_text(value)
        return NULL_KEY if text is None else text

    def view(self) -> dict[str, Any]:
        return {"member": self.member, "limit": self.limit}


def check_per_key(cap_id: str, input_type: Any, per_key: PerKey | None) -> PerKey | None:
    """`per_key` as declared, or `FlowError` saying what is wrong with it."""
    if per_key is None:
        return None
    if not isinstance(per_key, PerKey):
        raise FlowError(f"per_key of {cap_id!r} must be a PerKey(member, limit)")
    if isinstance(per_key.limit, bool) or not isinstance(per_key.limit, int) or per_key.limit < 1:
        raise FlowError(
            f"per_key limit {per_key.limit!r} of {cap_id!r} must be a whole number of at least 1"
        )
    try:
        check_searchable(cap_id, input_type, (per_key.member,))
    except SearchableError as exc:
        raise FlowError(str(exc).replace("searchable", "per_key member", 1)) from exc
    return per_key

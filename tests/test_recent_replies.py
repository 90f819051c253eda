"""The replies both flows keep in memory (om/schema/recent_replies.py): bounded in
entries, least recently used out first, and their bytes estimate honest."""

from __future__ import annotations

import os
import tracemalloc
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from om.schema.recent_replies import ENTRY_OVERHEAD_BYTES, RecentReplies, entry_bytes

KEYS = st.tuples(st.sampled_from(["client-a", "client-b", "c" * 36]), st.integers(0, 20))
OPS = st.lists(st.tuples(st.sampled_from(["put", "get", "drop"]), KEYS,
                         st.binary(max_size=300)), max_size=200)


@settings(max_examples=200, deadline=None)
@given(entries_max=st.integers(1, 8), ops=OPS)
def test_bounded_and_the_bytes_are_the_entries_bytes(
        entries_max: int, ops: list[tuple[str, tuple[str, int], bytes]]) -> None:
    replies = RecentReplies(entries_max)
    model: dict[tuple[str, int], tuple[bytes, int, bytes]] = {}   # in use order
    for op, key, response in ops:
        if op == "put":
            reply = (response, 1, b"f" * 32)
            replies.put(key, reply)
            model.pop(key, None)
            model[key] = reply
            while len(model) > entries_max:
                del model[next(iter(model))]
        elif op == "get":
            assert replies.get(key) == model.get(key)
            if key in model:
                model[key] = model.pop(key)
        else:
            replies.drop(key)
            model.pop(key, None)
        assert len(replies) == len(model) <= entries_max
        assert replies.bytes == sum(entry_bytes(k, v) for k, v in model.items())
    replies.clear()
    assert (len(replies), replies.bytes) == (0, 0)


# Enough entries that the dict's table and the strings' headers weigh as in a full cache:
# the estimate's ratio to the heap was 1.06-1.13 at 5,000, 10,000 and 20,000 entries
# (the dict grows in steps), and 5,000 take a fifth of the time of 20,000.
ENTRIES = 5_000


def test_the_bytes_estimate_is_within_a_quarter_of_what_the_heap_holds() -> None:
    for response_bytes in (12, 200):
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            replies = RecentReplies(ENTRIES)
            shared = str(uuid.uuid4())
            for i in range(ENTRIES):
                client = str(uuid.uuid4()) if i % 2 else shared
                replies.put((client, 10**9 + i), (os.urandom(response_bytes),
                                                  1_795_757_696_000 + i, os.urandom(32)))
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert 0.75 * held <= replies.bytes <= 1.25 * held, (response_bytes, held, replies.bytes)
        assert replies.bytes >= len(replies) * ENTRY_OVERHEAD_BYTES

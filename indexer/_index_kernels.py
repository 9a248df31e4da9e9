"""Compiled search kernels over the raw bytes of an ``.index`` / ``.timeindex`` file.

The index files are big-endian and numba does not support non-native byte-order arrays, so every
kernel takes the file as a *native* ``uint32`` array (``words``) and byte-swaps the fields it
reads. Entries are 2 words (``.index``: relative offset, position) or 3 words (``.timeindex``:
timestamp high, timestamp low, relative offset); ``layout`` says which:

* ``OFFSET_LAYOUT``: key = ``base_offset + int32(word 0)``, value = ``int32(word 1)``;
* ``TIME_LAYOUT``: key = ``int64(word 0 << 32 | word 1)``, value = ``base_offset + int32(word 2)``.

The searches are those of Kafka's ``AbstractIndex`` (``indexSlotRangeFor``, ``binarySearch``), see
the spec section 2: the warm/cold split of KAFKA-6432 and an upper-middle binary search that returns
on an exact match. :func:`plain_slot_for` is the whole-range binary search Kafka used before that
change; it returns the same slots and exists so the page-touch behaviour of the two strategies can be
compared (tests and benchmarks).

Batches of lookups (``lookup_many``) do not search the file: :func:`build_search_tree` turns the
decoded keys into a cache-line-node B+-tree once and :func:`floor_many_tree` walks it, many
targets at a time (see their docstrings for why that layout is fast on random targets).

Every kernel clamps ``entries`` to the slots ``words`` really holds, so a reader that raced a
resize reads stale but never out-of-bounds memory. ``trace`` (an int64 array, possibly empty)
records the probed slots: ``trace[0]`` counts probes and ``trace[1:]`` receives the slots in order
as long as there is room. Pass an empty array to record nothing.
"""

from __future__ import annotations

import os
import threading

import numpy as np
from numba import njit

from indexer._bytes import word_int32, word_int64

OFFSET_LAYOUT = 0
TIME_LAYOUT = 1


@njit(cache=True, inline="always")
def _words_per_entry(layout: int) -> int:
    return 2 if layout == OFFSET_LAYOUT else 3


@njit(cache=True, inline="always")
def entry_key(words: np.ndarray, n: int, layout: int, base_offset: int) -> int:
    """The key of slot ``n``: the absolute offset (``.index``) or the timestamp (``.timeindex``)."""
    if layout == OFFSET_LAYOUT:
        return base_offset + word_int32(words, 2 * n)
    return word_int64(words, 3 * n)


@njit(cache=True, inline="always")
def entry_value(words: np.ndarray, n: int, layout: int, base_offset: int) -> int:
    """The value of slot ``n``: the position (``.index``) or the absolute offset (``.timeindex``)."""
    if layout == OFFSET_LAYOUT:
        return word_int32(words, 2 * n + 1)
    return base_offset + word_int32(words, 3 * n + 2)


@njit(cache=True, inline="always")
def _probe(words: np.ndarray, n: int, layout: int, base_offset: int, by_value: bool, trace: np.ndarray) -> int:
    if trace.size > 0:
        count = trace[0]
        if count + 1 < trace.size:
            trace[count + 1] = n
        trace[0] = count + 1
    if by_value:
        return entry_value(words, n, layout, base_offset)
    return entry_key(words, n, layout, base_offset)


@njit(cache=True, inline="always")
def _clamped_entries(words: np.ndarray, entries: int, layout: int) -> int:
    return min(entries, words.size // _words_per_entry(layout))


# The ``begin`` callers pass for slot 0: an int64, not the literal 0, as numba compiles a kernel called
# from another one once per literal argument value as well as once for int64.
_FIRST_SLOT: int = np.int64(0)  # type: ignore[assignment]  # an int to the callers' annotations


@njit(cache=True)
def _binary_search(
    words: np.ndarray,
    entries: int,
    layout: int,
    base_offset: int,
    target: int,
    by_value: bool,
    upper_bound: bool,
    begin: int,
    end: int,
    trace: np.ndarray,
) -> int:
    lo = begin
    hi = end
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        found = _probe(words, mid, layout, base_offset, by_value, trace)
        if found > target:
            hi = mid - 1
        elif found < target:
            lo = mid
        else:
            return mid
    if not upper_bound:
        return lo
    if lo == entries - 1:
        return -1
    return lo + 1


@njit(cache=True)
def slot_for(
    words: np.ndarray,
    entries: int,
    layout: int,
    base_offset: int,
    target: int,
    by_value: bool,
    upper_bound: bool,
    warm_entries: int,
    trace: np.ndarray,
) -> int:
    """Kafka's ``indexSlotRangeFor``: largest lower bound (or smallest upper bound) slot, or -1."""
    entries = _clamped_entries(words, entries, layout)
    if entries == 0:
        return -1
    first_hot = max(0, entries - 1 - warm_entries)
    if _probe(words, first_hot, layout, base_offset, by_value, trace) < target:
        return _binary_search(
            words, entries, layout, base_offset, target, by_value, upper_bound, first_hot, entries - 1, trace
        )
    if _probe(words, 0, layout, base_offset, by_value, trace) > target:
        return 0 if upper_bound else -1
    return _binary_search(
        words, entries, layout, base_offset, target, by_value, upper_bound, _FIRST_SLOT, first_hot, trace
    )


@njit(cache=True)
def plain_slot_for(
    words: np.ndarray,
    entries: int,
    layout: int,
    base_offset: int,
    target: int,
    by_value: bool,
    upper_bound: bool,
    trace: np.ndarray,
) -> int:
    """The same answer as :func:`slot_for` from one binary search over every slot (pre KAFKA-6432)."""
    entries = _clamped_entries(words, entries, layout)
    if entries == 0:
        return -1
    if _probe(words, 0, layout, base_offset, by_value, trace) > target:
        return 0 if upper_bound else -1
    return _binary_search(
        words, entries, layout, base_offset, target, by_value, upper_bound, _FIRST_SLOT, entries - 1, trace
    )


@njit(cache=True)
def lookup_entry(
    words: np.ndarray,
    entries: int,
    layout: int,
    base_offset: int,
    target: int,
    by_value: bool,
    upper_bound: bool,
    warm_entries: int,
    trace: np.ndarray,
) -> tuple[int, int, int]:
    """:func:`slot_for` plus the key and value of the slot found (0, 0 when the slot is -1)."""
    slot = slot_for(words, entries, layout, base_offset, target, by_value, upper_bound, warm_entries, trace)
    if slot < 0:
        return slot, 0, 0
    return slot, entry_key(words, slot, layout, base_offset), entry_value(words, slot, layout, base_offset)


@njit(cache=True)
def lookup_many(
    words: np.ndarray,
    entries: int,
    layout: int,
    base_offset: int,
    targets: np.ndarray,
    warm_entries: int,
    miss_key: int,
    miss_value: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Largest-lower-bound-by-key lookups of every target: the entries' keys and values (miss: given)."""
    n = targets.size
    keys = np.empty(n, np.int64)
    values = np.empty(n, np.int64)
    no_trace = np.empty(0, np.int64)
    for i in range(n):
        slot = slot_for(words, entries, layout, base_offset, targets[i], False, False, warm_entries, no_trace)
        if slot < 0:
            keys[i] = miss_key
            values[i] = miss_value
        else:
            keys[i] = entry_key(words, slot, layout, base_offset)
            values[i] = entry_value(words, slot, layout, base_offset)
    return keys, values


def decode_entries(words: np.ndarray, entries: int, layout: int, base_offset: int) -> tuple[np.ndarray, np.ndarray]:
    """Keys and values of slots ``0 .. entries-1`` as native int64 arrays.

    The arrays are allocated by numpy, not numba, so large ones get transparent huge pages: random
    reads into them (the search tree's value gather) then rarely miss the TLB.
    """
    entries = min(entries, words.size // (2 if layout == OFFSET_LAYOUT else 3))
    keys = np.empty(entries, np.int64)
    values = np.empty(entries, np.int64)
    _decode_into(words, layout, base_offset, keys, values)
    return keys, values


@njit(cache=True)
def _decode_into(words: np.ndarray, layout: int, base_offset: int, keys: np.ndarray, values: np.ndarray) -> None:
    for n in range(keys.size):
        keys[n] = entry_key(words, n, layout, base_offset)
        values[n] = entry_value(words, n, layout, base_offset)


SEARCH_FANOUT = 8
"""Keys per node of the search tree: 64 bytes, one cache line (``floor_many_tree`` assumes 8)."""
_SEARCH_GROUP = 32  # queries walked down the tree together (memory-level parallelism)
_TARGETS_PER_THREAD = 1 << 17  # ~10 ms of walking per thread; below this a thread start-up is not worth it
_CACHE_LINE = 64


def build_search_tree(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A static B+-tree over strictly increasing int64 ``keys``: ``(tree, starts)`` for :func:`floor_many_tree`.

    Level 0 is ``keys`` itself; level ``k + 1`` holds every ``SEARCH_FANOUT``-th key of level ``k``,
    until one node (at most ``SEARCH_FANOUT`` keys) is left. Each level is padded with ``INT64_MAX``
    to whole nodes and starts at ``tree[starts[k]]``; the array is cache-line aligned, so each node
    is exactly one cache line. Why this is fast for random targets over a multi-megabyte index: a
    binary search makes ~20 dependent probes, each on a different cache line (and page) of the key
    array, while a walk down this tree reads one line per level (7 levels for 1310720 keys); the
    levels above the last two (~180 KiB for a full 10 MiB index) stay in L2, so only the last two
    levels and the value can miss. The tree costs 1/7 more memory than the keys alone.
    """
    fanout = SEARCH_FANOUT
    levels = [keys]
    while levels[-1].size > fanout:
        levels.append(levels[-1][::fanout])
    padded = [-(-level.size // fanout) * fanout for level in levels]
    total = sum(padded)
    raw = np.empty(total + _CACHE_LINE // 8, np.int64)
    skip = (-raw.ctypes.data % _CACHE_LINE) // 8
    tree = raw[skip : skip + total]
    tree.fill(np.iinfo(np.int64).max)
    starts = np.cumsum([0] + padded[:-1]).astype(np.int64)
    for level, start in zip(levels, starts.tolist(), strict=True):
        tree[start : start + level.size] = level
    return tree, starts


def floor_many_tree(
    tree: np.ndarray,
    starts: np.ndarray,
    values: np.ndarray,
    targets: np.ndarray,
    miss_key: int,
    miss_value: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Largest ``key <= target`` for every target, over a tree from :func:`build_search_tree`.

    ``values[slot]`` is the value of key slot ``slot`` (``values.size`` keys, at least one);
    targets below the first key give ``(miss_key, miss_value)``. Large batches are split over the
    CPUs: the kernel releases the GIL and only reads the (immutable) tree, each thread writing its
    own slice of the output. Plain short-lived threads are used (no pool, no numba threading
    layer), so concurrent callers and forked processes are safe.
    """
    out_keys = np.empty(targets.size, np.int64)
    out_values = np.empty(targets.size, np.int64)
    parts = max(1, min(os.cpu_count() or 1, targets.size // _TARGETS_PER_THREAD))
    bounds = [targets.size * part // parts for part in range(parts + 1)]
    slices = [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]

    def search(part: slice) -> None:
        _floor_tree_into(tree, starts, values, targets[part], miss_key, miss_value, out_keys[part], out_values[part])

    helpers = [threading.Thread(target=search, args=(part,)) for part in slices[1:]]
    for helper in helpers:
        helper.start()
    search(slices[0])
    for helper in helpers:
        helper.join()
    return out_keys, out_values


@njit(cache=True, nogil=True)
def _floor_tree_into(
    tree: np.ndarray,
    starts: np.ndarray,
    values: np.ndarray,
    targets: np.ndarray,
    miss_key: int,
    miss_value: int,
    out_keys: np.ndarray,
    out_values: np.ndarray,
) -> None:
    """:func:`floor_many_tree` of ``targets`` into ``out_keys`` / ``out_values``, on this thread.

    Targets at or above the last key take the last slot without a walk, so the ``INT64_MAX``
    padding is never counted. Targets are walked down in groups of ``_SEARCH_GROUP``, one level at
    a time for the whole group: the group's node loads are independent, so their cache misses
    overlap instead of queueing behind each other, which is what makes random targets fast.
    Within a node, three compare-and-select steps (no branches, so no mispredictions on random
    targets) find the slot.
    """
    fanout = SEARCH_FANOUT
    n = values.size
    first = tree[0]
    last = tree[n - 1]
    top = starts.size - 1
    count = targets.size
    probe = np.empty(_SEARCH_GROUP, np.int64)
    node = np.empty(_SEARCH_GROUP, np.int64)
    for begin in range(0, count, _SEARCH_GROUP):
        group = min(_SEARCH_GROUP, count - begin)
        for q in range(group):
            t = targets[begin + q]
            probe[q] = t if first <= t < last else first  # out-of-range targets walk harmlessly
            node[q] = 0
        for level in range(top, -1, -1):
            start = starts[level]
            # The node's first key is <= the target, so a branch-free binary search of the other 7
            # finds the floor. Its first probe is done for the whole group first: a short loop of
            # independent loads, so the group's cache misses are all in flight at once.
            for q in range(group):
                first_slot = start + node[q] * fanout
                node[q] = first_slot + 4 if tree[first_slot + 4] <= probe[q] else first_slot
            for q in range(group):
                slot = node[q]
                slot = slot + 2 if tree[slot + 2] <= probe[q] else slot
                slot = slot + 1 if tree[slot + 1] <= probe[q] else slot
                node[q] = slot - start
        for q in range(group):
            t = targets[begin + q]
            if t < first:
                out_keys[begin + q] = miss_key
                out_values[begin + q] = miss_value
                continue
            slot = n - 1 if t >= last else node[q]
            out_keys[begin + q] = tree[slot]
            out_values[begin + q] = values[slot]

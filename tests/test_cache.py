"""layoutcore.driver.LRUCache: bounded, least recently used out first, atomic under threads."""

from __future__ import annotations

import collections
import concurrent.futures
import random
import threading
from typing import Any

import pytest

from layoutcore.driver import LRUCache


def test_evicts_the_least_recently_used_entry() -> None:
    cache: LRUCache[str, int] = LRUCache(3)
    for key, value in (("a", 1), ("b", 2), ("c", 3)):
        cache.put(key, value)
    assert cache.get("a") == 1  # a is now the most recent: b goes first
    cache.put("d", 4)
    assert cache.keys() == ["c", "a", "d"] and "b" not in cache
    assert cache["c"] == 3  # a hit by [] counts too
    cache["e"] = 5
    assert cache.keys() == ["d", "c", "e"] and len(cache) == 3
    assert cache.setdefault("c", 99) == 3 and cache.setdefault("f", 6) == 6 and "d" not in cache
    assert cache.get_or_compute("g", lambda: 7) == 7 and cache.get_or_compute("g", lambda: 0) == 7
    assert cache.pop("g") == 7 and cache.pop("g") is None
    with pytest.raises(KeyError):
        cache["missing"]
    cache.clear()
    assert len(cache) == 0 and cache.get("c", -1) == -1


def test_matches_a_reference_lru_on_random_operations() -> None:
    rng = random.Random(0)
    cache: LRUCache[int, int] = LRUCache(8)
    model: collections.OrderedDict[int, int] = collections.OrderedDict()
    for step in range(5000):
        key = rng.randrange(20)
        if rng.random() < 0.5:
            cache.put(key, step)
            model[key] = step
            model.move_to_end(key)
            if len(model) > 8:
                model.popitem(last=False)
        else:
            expected = model.get(key)
            if expected is not None:
                model.move_to_end(key)
            assert cache.get(key) == expected
        assert cache.keys() == list(model)


@pytest.mark.parametrize("size", [0, -1, 2.0, True])
def test_refuses_a_size_that_is_no_positive_int(size: Any) -> None:
    with pytest.raises(ValueError, match="maxsize"):
        LRUCache(size)


def test_stays_bounded_and_consistent_under_threads() -> None:
    cache: LRUCache[int, int] = LRUCache(64)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(20000):
                key = rng.randrange(256)
                value = cache.get(key)
                assert value is None or value == key * 3
                cache.put(key, key * 3)
        except BaseException as exc:  # reported below, in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(cache) == 64 and len(set(cache.keys())) == 64


def test_peek_reads_without_making_the_entry_recent() -> None:
    cache: LRUCache[str, int] = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.peek("a") == 1 and cache.peek("z") is None and cache.peek("z", -1) == -1
    cache.put("c", 3)  # a was only peeked: it is still the least recent, so it goes
    assert cache.keys() == ["b", "c"] and cache.peek("a") is None
    assert cache.get("b") == 2  # a get does make it recent
    cache.put("d", 4)
    assert cache.keys() == ["b", "d"]


def test_peek_under_threads_sees_only_values_put() -> None:
    cache: LRUCache[int, int] = LRUCache(16)

    def work(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(20000):
            key = rng.randrange(64)
            value = cache.peek(key)
            assert value is None or value == key * 3
            if rng.random() < 0.5:
                cache.put(key, key * 3)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(work, range(4)))  # re-raises a worker's failure here
    assert len(cache) == 16

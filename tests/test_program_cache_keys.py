"""The caches' keys worked out once (daskgrad._dask.program.CacheKey, Program.hashes, a slot's description
remembered on its array): a hit is an equal key, never a collision of hashes, and what is remembered follows
an array changed in place."""
import collections

import dask.array as da
import numpy as np

import daskgrad as dg
from daskgrad._dask import program
from daskgrad._dask.program import CacheKey, Program, _lookup, _slot_desc, is_data


def test_cache_keys_equal_exactly_when_their_keys_are():
    a, b = CacheKey((1, (2.0, "x"))), CacheKey((1, (2.0, "x")))
    assert a == b and hash(a) == hash(b)
    assert CacheKey((1, 2)) != CacheKey((1, 3))
    # hashes that collide (given, here) do not make unequal keys equal
    assert CacheKey((1, 2), 7) != CacheKey((1, 3), 7)
    assert CacheKey((1, 2)) != (1, 2)
    cache = collections.OrderedDict()
    cache[CacheKey(("first",), 7)] = "a template"
    cache[CacheKey(("second",), 7)] = "another"
    assert _lookup(cache, CacheKey(("first",), 7)) == "a template"
    assert _lookup(cache, CacheKey(("third",), 7)) is None
    assert list(cache.values()) == ["another", "a template"]  # the hit is the most recently used


def test_program_hashes_are_the_keys_parts_and_follow_asking_also():
    x = dg.ones((6, 2), chunks=(3, 2), dtype="float64")
    y = x * 2
    a, b = y.sum(axis=0)._storage.value, y._storage.value
    whole = Program.of([a, b])
    assert whole.hashes == tuple(map(hash, whole.key))
    also = Program.of([a]).asking_also([b])
    assert also.key == whole.key and also.hashes == whole.hashes


def test_a_programs_template_is_found_by_an_equal_key_only():
    program.step_cache_clear()
    x = dg.tensor(np.arange(6.0)).requires_grad_()
    for c in (2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 2.0):
        x.grad = None
        (x * c).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.full(6, c))
    assert program.step_cache_info()["hits"] > 0


def test_a_slots_description_follows_its_array_changed_in_place():
    a = da.from_array(np.arange(6.0), chunks=3)
    b = a[a > 2]  # unknown chunk sizes
    first = _slot_desc(b)
    assert _slot_desc(b) is first  # remembered
    b.compute_chunk_sizes()  # the chunks set in place
    assert _slot_desc(b) == ("graph", b.name, ((0, 3),), "<f8", "numpy", "ndarray") != first
    c = da.from_array(np.arange(6.0), chunks=3).persist()
    assert is_data(c) and _slot_desc(c)[0] == "data"
    c[0] = 5.0  # dask's __setitem__: another graph and name, in place
    assert not is_data(c) and _slot_desc(c) == ("graph", c.name, ((3, 3),), "<f8", "numpy", "ndarray")

"""Step 6 of the data flow: what runs on a worker, one chunk at a time.

Kernels take whatever array type the chunk is (NumPy, cupy, a test double) and
use only operators and NumPy functions that dispatch on it (NEP 13/18/35), so
nothing here moves a chunk to the host.
"""
from __future__ import annotations


def matmul(a, b):
    return a @ b


def matmul_partial(a, b):
    """One chunk pair's share of a product whose contracted axis spans several chunks."""
    return (a @ b)[None]

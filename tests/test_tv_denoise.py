"""examples/tv_denoise.py: TV denoising of an image in uneven chunks improves PSNR, writes valid PNGs,
and the TV gradient (stencil and slice forms) is right across chunk boundaries."""
import importlib.util
import os
import struct
import zlib

import numpy as np
import pytest

import daskgrad as dg
from daskgrad.testing import gradcheck

from conftest import leaf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _example():
    spec = importlib.util.spec_from_file_location("tv_denoise", os.path.join(ROOT, "examples", "tv_denoise.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read_png_gray(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height, depth, colour = struct.unpack(">IIBB", data[16:26])
    idat = data[data.index(b"IDAT") + 4:data.index(b"IEND") - 8]
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, width + 1)
    assert depth == 8 and colour == 0 and (rows[:, 0] == 0).all()
    return rows[:, 1:]


@pytest.mark.parametrize("blur", [False, True])
def test_tv_example_improves_psnr_on_uneven_chunks_and_writes_pngs(tmp_path, blur):
    args = ["--size", "48", "--chunks", "20", "11", "17", "--steps", "12", "--out", str(tmp_path), "--crop", "16"]
    start, end = _example().main(args + (["--blur", "--sigma", "0.05", "--lam", "0.02"] if blur else []))
    assert end > start + (0.5 if blur else 2.0)
    assert _read_png_gray(tmp_path / "after.png").shape == (48, 48)
    assert _read_png_gray(tmp_path / "before_crop.png").shape == (16, 16)


@pytest.mark.parametrize("chunks", [((4, 1, 3), (2, 5)), ((1,) * 8, (7,)), (8, 7)])
def test_tv_gradient_is_right_across_chunk_boundaries(chunks, rng):
    ex = _example()
    x = rng.uniform(0, 1, (8, 7))
    u = leaf(x, chunks)
    assert gradcheck(lambda t: ex.tv(t, 0.1), [u], atol=1e-6, rtol=1e-5)
    assert gradcheck(lambda t: ex.tv_with_slices(t, 0.1), [u], atol=1e-6, rtol=1e-5)
    (g1,) = dg.grad(ex.tv(u, 0.1), [u])
    (g2,) = dg.grad(ex.tv_with_slices(u, 0.1), [u])
    np.testing.assert_allclose(g1.numpy(), g2.numpy(), atol=1e-12)
    assert g1.chunks == u.chunks

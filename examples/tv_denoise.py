"""Total-variation denoising (or deblurring) of an image much larger than one chunk.

The unknown image ``u`` is a requires-grad leaf made of chunks; the loss is

    0.5 * ||A u - f||^2 + lam * sum(sqrt(dx^2 + dy^2 + eps^2))        (smooth, "Charbonnier" TV)

with ``A`` the identity (denoising) or a small blur (``--blur``, deblurring with
``daskgrad.convolve``).  The finite differences and the blur read across chunk
boundaries, and so do their gradients.  Plain gradient descent, written as in PyTorch.
The test image (piecewise-constant shapes plus noise) is generated chunk by chunk, lazily.

    python examples/tv_denoise.py --size 2048 --chunks 512 --steps 150 --out tv-out

writes ``before.png`` (the data ``f``) and ``after.png`` (``u``) at full size, and prints PSNR.
"""
from __future__ import annotations

import argparse
import os
import struct
import time
import zlib

import dask.array as da
import numpy as np

import daskgrad as dg


# --------------------------------------------------------------------- test image
def _shapes_block(block, size, block_info=None):
    """Piecewise-constant shapes in [0, 1], drawn from each cell's global coordinates."""
    (r0, r1), (c0, c1) = block_info[None]["array-location"]
    y, x = np.meshgrid((np.arange(r0, r1) + 0.5) / size, (np.arange(c0, c1) + 0.5) / size, indexing="ij")
    img = np.full(y.shape, 0.2)
    img[(x - 0.3) ** 2 + (y - 0.3) ** 2 < 0.15 ** 2] = 0.9                         # disk
    img[(abs(x - 0.7) < 0.18) & (abs(y - 0.35) < 0.1)] = 0.6                      # rectangle
    ring = (x - 0.65) ** 2 + (y - 0.72) ** 2
    img[(ring < 0.2 ** 2) & (ring > 0.12 ** 2)] = 0.75                           # ring
    img[(abs(x - y * 0.5 - 0.05) < 0.03) & (y > 0.55) & (y < 0.95)] = 0.0          # slanted bar
    stripes = (x > 0.08) & (x < 0.28) & (y > 0.62) & (y < 0.9)
    img[stripes & (np.floor(x * 60) % 2 == 0)] = 1.0                             # fine stripes
    return img


def test_image(size, chunks):
    """The clean image, as a lazy chunked array (nothing made on the client)."""
    template = da.empty((size, size), chunks=chunks, dtype=np.float64)
    return dg.from_array(da.map_blocks(_shapes_block, template, size=size, dtype=np.float64))


def blur_kernel(radius=2):
    k = np.exp(-0.5 * (np.arange(-radius, radius + 1) / (radius / 1.5)) ** 2)
    k = np.outer(k, k)
    return k / k.sum()


# ---------------------------------------------------------------------------- model
FORWARD_DIFF = np.array([0.0, -1.0, 1.0])  # centred on the middle tap: out[i] = u[i+1] - u[i]


def tv(u, eps):
    """Smooth isotropic total variation with forward differences; ``nearest`` repeats the last
    row/column, so the difference past the edge is zero (Neumann).  ``diff`` + ``pad`` gives
    the same numbers; the stencil needs no slicing of misaligned chunks."""
    dx = dg.correlate(u, FORWARD_DIFF[:, None], mode="nearest")
    dy = dg.correlate(u, FORWARD_DIFF[None, :], mode="nearest")
    return dg.sum(dg.sqrt(dx * dx + dy * dy + eps * eps))


def tv_with_slices(u, eps):
    """The same TV written with ``diff`` and ``pad`` (shifted slices)."""
    dx = dg.pad(dg.diff(u, axis=0), ((0, 1), (0, 0)))
    dy = dg.pad(dg.diff(u, axis=1), ((0, 0), (0, 1)))
    return dg.sum(dg.sqrt(dx * dx + dy * dy + eps * eps))


def psnr(u, clean):
    with dg.no_grad():
        return 10 * np.log10(1.0 / float(dg.mean((u - clean) ** 2)))


# ----------------------------------------------------------------------------- PNG
def write_png(path, img):
    """8-bit grayscale PNG of ``img`` (values clipped to [0, 1]) with zlib only: no imaging library."""
    data = (np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8)
    raw = b"".join(b"\x00" + row.tobytes() for row in data)  # filter type 0 on every row

    def chunk_(tag, body):
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", data.shape[1], data.shape[0], 8, 0, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk_(b"IHDR", header) + chunk_(b"IDAT", zlib.compress(raw, 9))
                + chunk_(b"IEND", b""))


# ----------------------------------------------------------------------------- main
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1024, help="image side in pixels")
    p.add_argument("--chunks", type=int, nargs="+", default=[256],
                   help="chunk side, or the chunk sizes along each axis (uneven allowed)")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--lam", type=float, default=0.08, help="TV weight")
    p.add_argument("--eps", type=float, default=0.02, help="TV smoothing")
    p.add_argument("--sigma", type=float, default=0.15, help="noise level")
    p.add_argument("--blur", action="store_true", help="deblur: A is a 5x5 Gaussian blur (daskgrad.convolve)")
    p.add_argument("--out", default="tv-out", help="output folder for before.png / after.png")
    p.add_argument("--crop", type=int, default=0, help="also write N x N crops from the centre")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    chunks = args.chunks[0] if len(args.chunks) == 1 else (tuple(args.chunks),) * 2
    clean = test_image(args.size, chunks)
    kernel = blur_kernel() if args.blur else None

    def A(t):
        return dg.convolve(t, kernel, mode="reflect") if args.blur else t

    noise = dg.from_array(da.random.default_rng(args.seed).standard_normal(clean.shape, chunks=clean.chunks))
    f = (A(clean) + args.sigma * noise).detach()

    u = f.clone().requires_grad_()
    # gradient descent with step 1/L, L bounding the Hessian: ||A||^2 <= 1, the TV term <= 8 lam / eps
    lr = 1.0 / (1.0 + 8 * args.lam / args.eps)
    start = psnr(u, clean)
    print(f"{args.size}x{args.size} image in chunks {clean.chunks[0][:3]}..., {args.steps} steps of "
          f"{'deblurring' if args.blur else 'denoising'}, lr {lr:.4f}")
    print(f"PSNR before: {start:.2f} dB")
    t0 = time.perf_counter()
    for step in range(args.steps):
        residual = A(u) - f
        loss = 0.5 * dg.sum(residual * residual) + args.lam * tv(u, args.eps)
        if step % max(1, args.steps // 5) == 0:
            print(f"step {step:4d}  loss {loss.detach().item():.2f}")
        loss.backward()
        with dg.no_grad():
            u -= lr * u.grad
        u.grad = None
    end = psnr(u, clean)
    print(f"PSNR after:  {end:.2f} dB  ({time.perf_counter() - t0:.1f} s)")

    os.makedirs(args.out, exist_ok=True)
    before, after = f.numpy(), u.detach().numpy()
    write_png(os.path.join(args.out, "before.png"), before)
    write_png(os.path.join(args.out, "after.png"), after)
    if args.crop:
        lo = (args.size - args.crop) // 2
        window = (slice(lo, lo + args.crop),) * 2
        write_png(os.path.join(args.out, "before_crop.png"), before[window])
        write_png(os.path.join(args.out, "after_crop.png"), after[window])
    return start, end


if __name__ == "__main__":
    main()

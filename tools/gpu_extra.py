"""Which GPU extra of daskgrad matches this machine's NVIDIA driver: ``gpu-cuda12`` or ``gpu-cuda13``.

``make test-gpu`` and ``make bench-gpu`` install the extra this prints (and first remove the other
CUDA build of cupy: both install the ``cupy`` package).  The driver's CUDA version is the one
``nvidia-smi`` prints in its header (``CUDA Version: 13.0``): cupy built for that major version runs
on it.  Without a driver, or with one of another major version, it exits 1 with a message saying so.

    python tools/gpu_extra.py               # the extra, e.g. gpu-cuda13
    python tools/gpu_extra.py --conflicting # the cupy builds of the other extras, to uninstall
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

EXTRAS = {12: ("gpu-cuda12", "cupy-cuda12x"), 13: ("gpu-cuda13", "cupy-cuda13x")}


def cuda_major(smi_output: str) -> int | None:
    """The major CUDA version in ``nvidia-smi``'s header, or None if it names none."""
    m = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", smi_output)
    return int(m.group(1)) if m else None


def extra_for(major: int | None) -> str:
    """The extra for a driver's CUDA major version; SystemExit with the reason where there is none."""
    if major is None:
        raise SystemExit("nvidia-smi printed no 'CUDA Version': is the NVIDIA driver loaded? "
                         "make test-gpu needs a machine with an NVIDIA GPU and a CUDA 12 or 13 driver")
    if major not in EXTRAS:
        raise SystemExit(f"the NVIDIA driver supports CUDA {major}; daskgrad's GPU extras are "
                         f"{', '.join(e for e, _ in EXTRAS.values())} (CUDA {', '.join(map(str, EXTRAS))})")
    return EXTRAS[major][0]


def smi_output() -> str:
    """``nvidia-smi``'s output; SystemExit with the reason where it is missing or fails."""
    if shutil.which("nvidia-smi") is None:
        raise SystemExit("no NVIDIA driver on this machine (nvidia-smi is not on PATH): make test-gpu and "
                         "make bench-gpu need an NVIDIA GPU; the CPU suite (make test) tests the GPU code paths "
                         "with a strict chunk type instead")
    out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise SystemExit(f"nvidia-smi failed (exit {out.returncode}): {(out.stderr or out.stdout).strip()[-400:]}")
    return out.stdout


def main(argv: list[str]) -> None:
    extra = extra_for(cuda_major(smi_output()))
    if "--conflicting" in argv:
        print(" ".join(pkg for e, pkg in EXTRAS.values() if e != extra))
    else:
        print(extra)


if __name__ == "__main__":
    main(sys.argv[1:])

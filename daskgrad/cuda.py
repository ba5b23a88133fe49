"""``daskgrad.cuda``: torch's ``torch.cuda`` questions, answered for cupy chunks (``device="cuda"``)."""
from __future__ import annotations

from ._tensor import require_cuda


def is_available() -> bool:
    """Whether ``device="cuda"`` can be used here: cupy is installed and sees a GPU."""
    try:
        require_cuda()
    except (AssertionError, RuntimeError):
        return False
    return True


def device_count() -> int:
    """The number of GPUs cupy sees here (0 without cupy)."""
    if not is_available():
        return 0
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())

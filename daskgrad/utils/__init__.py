"""torch.utils's counterparts: :mod:`daskgrad.utils.checkpoint` (activation checkpointing, and
checkpointed time stepping on :mod:`daskgrad.utils.revolve`'s binomial schedule)."""
from . import checkpoint, revolve

__all__ = ["checkpoint", "revolve"]

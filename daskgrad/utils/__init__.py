"""torch.utils's counterparts: :mod:`daskgrad.utils.checkpoint` (activation checkpointing)."""
from . import checkpoint

__all__ = ["checkpoint"]

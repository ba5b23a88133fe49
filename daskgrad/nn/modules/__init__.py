"""torch's ``torch.nn.modules`` path, for what code reaches through it: ``utils`` (its
``consume_prefix_in_state_dict_if_present``).  daskgrad's modules themselves are in :mod:`daskgrad.nn`."""
from . import utils

__all__ = ["utils"]

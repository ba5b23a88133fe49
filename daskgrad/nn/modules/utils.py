"""torch's ``torch.nn.modules.utils``: ``consume_prefix_in_state_dict_if_present``."""
from __future__ import annotations

__all__ = ["consume_prefix_in_state_dict_if_present"]


def consume_prefix_in_state_dict_if_present(state_dict, prefix):
    """torch's: strips ``prefix`` from the keys of ``state_dict`` that start with it, in place, and from its
    ``_metadata`` keys (a DistributedDataParallel or DataParallel model's ``"module."``), so a local model loads it.

    Parameters
    ----------
    state_dict : dict
        A state dict (its ``_metadata``, when it has one, is edited too).
    prefix : str
        The prefix, ``"module."`` for a wrapped model.

    Examples
    --------
    >>> sd = {"module.weight": 1, "bias": 2}
    >>> nn.modules.utils.consume_prefix_in_state_dict_if_present(sd, "module.")
    >>> sorted(sd)
    ['bias', 'weight']
    """
    for key in list(state_dict.keys()):
        if key.startswith(prefix):
            state_dict[key[len(prefix):]] = state_dict.pop(key)
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:
        for key in list(metadata.keys()):
            # '' is the wrapper's own entry (kept), 'module' the model's, 'module.xx' the rest
            if len(key) == 0:
                continue
            if key == prefix.replace(".", "") or key.startswith(prefix):
                metadata[key[len(prefix):]] = metadata.pop(key)

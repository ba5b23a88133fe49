"""``torch.nn.utils``: gradient clipping (:mod:`.clip_grad`), parameters as one vector
(:mod:`.convert_parameters`), batch-norm folding (:mod:`.fusion`), ``rnn.pad_sequence``,
``stateless.functional_call``, parametrizations (:mod:`.parametrize`, :mod:`.parametrizations`) and the
hook-based ``weight_norm`` and ``spectral_norm``."""
from . import clip_grad, convert_parameters, fusion, parametrizations, parametrize, rnn, stateless
from .clip_grad import clip_grad_norm, clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_, get_total_norm
from .convert_parameters import parameters_to_vector, vector_to_parameters
from .fusion import fuse_conv_bn_eval, fuse_conv_bn_weights, fuse_linear_bn_eval, fuse_linear_bn_weights
from .spectral_norm import remove_spectral_norm, spectral_norm
from .weight_norm import remove_weight_norm, weight_norm

__all__ = ["clip_grad", "convert_parameters", "fusion", "parametrizations", "parametrize", "rnn", "stateless",
           "clip_grad_norm", "clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm",
           "parameters_to_vector", "vector_to_parameters", "fuse_conv_bn_eval", "fuse_conv_bn_weights",
           "fuse_linear_bn_eval", "fuse_linear_bn_weights", "remove_spectral_norm", "spectral_norm",
           "remove_weight_norm", "weight_norm"]

"""``daskgrad.nn.parameter``: torch's ``torch.nn.parameter`` names, :class:`Parameter` and the lazy modules'
:class:`UninitializedParameter` / :class:`UninitializedBuffer`.

>>> p = nn.parameter.UninitializedParameter()
>>> p
<UninitializedParameter>
"""
from .module import Parameter, UninitializedBuffer, UninitializedParameter, UninitializedTensorMixin, is_lazy

__all__ = ["Parameter", "UninitializedBuffer", "UninitializedParameter", "UninitializedTensorMixin", "is_lazy"]

"""``daskgrad.nn``: torch.nn's modules, for models whose parameters are small
(one chunk each) and whose data batches are big chunked tensors.

>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
>>> loss = nn.CrossEntropyLoss()(model(x), y)
"""
from . import functional
from .layers import GELU, Dropout, Embedding, LayerNorm, Linear, ReLU, Sequential, Sigmoid, Tanh
from .loss import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss
from .module import Module, Parameter

__all__ = ["BCEWithLogitsLoss", "CrossEntropyLoss", "Dropout", "Embedding", "GELU", "LayerNorm", "Linear",
           "MSELoss", "Module", "Parameter", "ReLU", "Sequential", "Sigmoid", "Tanh", "functional"]

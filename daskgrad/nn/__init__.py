"""``daskgrad.nn``: torch.nn's modules, for models whose parameters are small
(one chunk each) and whose data batches are big chunked tensors.

>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
>>> loss = nn.CrossEntropyLoss()(model(x), y)
"""
from . import functional, init, utils
from .layers import (CELU, ELU, GELU, GLU, SELU, Dropout, Embedding, Flatten, Hardshrink, Hardsigmoid, Hardswish,
                     Hardtanh, Identity, LayerNorm, LeakyReLU, Linear, LogSigmoid, LogSoftmax, Mish, ModuleDict,
                     ModuleList, PReLU, ReLU, ReLU6, Sequential, Sigmoid, SiLU, Softmax, Softmin, Softplus, Softshrink,
                     Softsign, Tanh, Tanhshrink, Threshold)
from .conv import AdaptiveAvgPool1d, AdaptiveAvgPool2d, AvgPool1d, AvgPool2d, Conv1d, Conv2d, MaxPool1d, MaxPool2d
from .normalization import (BatchNorm1d, BatchNorm2d, GroupNorm, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d,
                            LocalResponseNorm, RMSNorm)
from .spatial import (CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d, ConstantPad2d, ConstantPad3d,
                      PixelShuffle, PixelUnshuffle, ReflectionPad1d, ReflectionPad2d, ReflectionPad3d, ReplicationPad1d,
                      ReplicationPad2d, ReplicationPad3d, Upsample, UpsamplingBilinear2d, UpsamplingNearest2d,
                      ZeroPad1d, ZeroPad2d, ZeroPad3d)
from .loss import BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss
from .module import Module, Parameter, RemovableHandle

__all__ = ["AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AvgPool1d", "AvgPool2d", "BCEWithLogitsLoss", "BatchNorm1d",
           "BatchNorm2d", "CELU", "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d",
           "ConstantPad3d", "Conv1d", "Conv2d", "CrossEntropyLoss", "Dropout", "ELU", "Embedding", "Flatten", "GELU",
           "GLU", "GroupNorm", "Hardshrink", "Hardsigmoid", "Hardswish", "Hardtanh", "HuberLoss", "Identity",
           "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "L1Loss", "LayerNorm", "LeakyReLU", "Linear",
           "LocalResponseNorm", "LogSigmoid", "LogSoftmax", "MSELoss", "MaxPool1d", "MaxPool2d", "Mish", "Module",
           "ModuleDict", "ModuleList", "NLLLoss", "PReLU", "Parameter", "PixelShuffle", "PixelUnshuffle", "RMSNorm",
           "ReLU", "ReLU6", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "RemovableHandle",
           "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "SELU", "Sequential", "SiLU", "Sigmoid",
           "SmoothL1Loss", "Softmax", "Softmin", "Softplus", "Softshrink", "Softsign", "Tanh", "Tanhshrink",
           "Threshold", "Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d", "ZeroPad1d", "ZeroPad2d",
           "ZeroPad3d", "functional", "init", "utils"]

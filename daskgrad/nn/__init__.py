"""``daskgrad.nn``: torch.nn's modules, for models whose parameters are small
(one chunk each) and whose data batches are big chunked tensors.

>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
>>> loss = nn.CrossEntropyLoss()(model(x), y)
"""
from . import functional, init, utils
from .layers import (CELU, ELU, GELU, GLU, SELU, AlphaDropout, Bilinear, ChannelShuffle, Container, Dropout, Dropout1d,
                     Dropout2d, Dropout3d, Embedding, EmbeddingBag, FeatureAlphaDropout, Flatten, Hardshrink,
                     Hardsigmoid, Hardswish, Hardtanh, Identity, LayerNorm, LeakyReLU, Linear, LogSigmoid, LogSoftmax,
                     Mish, ModuleDict, ModuleList, ParameterDict, ParameterList, PReLU, ReLU, ReLU6, RReLU,
                     Sequential, Sigmoid, SiLU, Softmax, Softmax2d, Softmin, Softplus, Softshrink, Softsign, Tanh,
                     Tanhshrink, Threshold, Unflatten)
from .conv import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d, AdaptiveMaxPool1d, AdaptiveMaxPool2d,
                   AdaptiveMaxPool3d, AvgPool1d, AvgPool2d, AvgPool3d, Conv1d, Conv2d, Conv3d, ConvTranspose1d,
                   ConvTranspose2d, ConvTranspose3d, Fold, FractionalMaxPool2d, FractionalMaxPool3d, LPPool1d,
                   LPPool2d, LPPool3d, MaxPool1d, MaxPool2d, MaxPool3d, MaxUnpool1d, MaxUnpool2d, MaxUnpool3d, Unfold)
from .normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, CrossMapLRN2d, GroupNorm, InstanceNorm1d,
                            InstanceNorm2d, InstanceNorm3d, LocalResponseNorm, RMSNorm, SyncBatchNorm)
from .spatial import (CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d, ConstantPad2d, ConstantPad3d,
                      PixelShuffle, PixelUnshuffle, ReflectionPad1d, ReflectionPad2d, ReflectionPad3d, ReplicationPad1d,
                      ReplicationPad2d, ReplicationPad3d, Upsample, UpsamplingBilinear2d, UpsamplingNearest2d,
                      ZeroPad1d, ZeroPad2d, ZeroPad3d)
from .loss import (BCELoss, BCEWithLogitsLoss, CTCLoss, CosineEmbeddingLoss, CosineSimilarity, CrossEntropyLoss,
                   GaussianNLLLoss, HingeEmbeddingLoss, HuberLoss, KLDivLoss, L1Loss, LinearCrossEntropyLoss,
                   LinearCrossEntropyOptions,
                   MSELoss, MarginRankingLoss,
                   MultiLabelSoftMarginLoss, NLLLoss, PairwiseDistance, PoissonNLLLoss, SmoothL1Loss, SoftMarginLoss,
                   TripletMarginLoss, MultiMarginLoss, MultiLabelMarginLoss, NLLLoss2d,
                   TripletMarginWithDistanceLoss)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .transformer import (MultiheadAttention, Transformer, TransformerDecoder, TransformerDecoderLayer,
                          TransformerEncoder, TransformerEncoderLayer)
from .module import Module, Parameter, RemovableHandle
from . import modules, parallel, parameter
from .parallel import DataParallel
from .adaptive import AdaptiveLogSoftmaxWithLoss
from .lazy import (LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d, LazyConv1d, LazyConv2d, LazyConv3d,
                   LazyConvTranspose1d, LazyConvTranspose2d, LazyConvTranspose3d, LazyInstanceNorm1d,
                   LazyInstanceNorm2d, LazyInstanceNorm3d, LazyLinear)

__all__ = ["AdaptiveAvgPool1d", "AdaptiveLogSoftmaxWithLoss", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
           "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "AlphaDropout", "AvgPool1d", "AvgPool2d",
           "AvgPool3d", "BCELoss", "BCEWithLogitsLoss", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Bilinear", "CELU",
           "CTCLoss", "ChannelShuffle", "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d",
           "ConstantPad2d",
           "ConstantPad3d", "Container", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
           "ConvTranspose3d",
           "CosineEmbeddingLoss", "CosineSimilarity", "CrossEntropyLoss", "CrossMapLRN2d", "DataParallel", "Dropout",
           "Dropout1d", "Dropout2d", "Dropout3d", "ELU", "Embedding", "EmbeddingBag", "FeatureAlphaDropout", "Flatten",
           "Fold", "FractionalMaxPool2d", "FractionalMaxPool3d", "GELU", "GLU", "GRU", "GRUCell", "GaussianNLLLoss",
           "GroupNorm", "Hardshrink", "Hardsigmoid", "Hardswish", "Hardtanh", "HingeEmbeddingLoss", "HuberLoss",
           "Identity", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "KLDivLoss", "L1Loss", "LPPool1d",
           "LPPool2d", "LPPool3d", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d", "LazyConv1d", "LazyConv2d",
           "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d", "LazyInstanceNorm1d",
           "LazyInstanceNorm2d", "LazyInstanceNorm3d", "LazyLinear", "LSTM", "LSTMCell", "LayerNorm", "LeakyReLU",
           "Linear", "LinearCrossEntropyLoss", "LinearCrossEntropyOptions", "LocalResponseNorm", "LogSigmoid",
           "LogSoftmax", "MSELoss",
           "MarginRankingLoss", "MaxPool1d",
           "MaxPool2d", "MaxPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "Mish", "Module", "ModuleDict",
           "ModuleList", "MultiLabelMarginLoss", "MultiLabelSoftMarginLoss", "MultiMarginLoss", "MultiheadAttention",
           "NLLLoss", "NLLLoss2d", "PReLU", "PairwiseDistance", "Parameter", "ParameterDict", "ParameterList",
           "PixelShuffle", "PixelUnshuffle", "PoissonNLLLoss", "RMSNorm", "RNN", "RNNBase", "RNNCell", "RNNCellBase",
           "RReLU", "ReLU", "ReLU6", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "RemovableHandle",
           "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "SELU", "Sequential", "SiLU", "Sigmoid",
           "SmoothL1Loss", "SoftMarginLoss", "Softmax", "Softmax2d", "Softmin", "Softplus", "Softshrink", "Softsign",
           "SyncBatchNorm", "Tanh", "Tanhshrink", "Threshold", "Transformer", "TransformerDecoder",
           "TransformerDecoderLayer", "TransformerEncoder", "TransformerEncoderLayer", "TripletMarginLoss",
           "TripletMarginWithDistanceLoss", "Unflatten", "Unfold", "Upsample", "UpsamplingBilinear2d",
           "UpsamplingNearest2d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d", "functional", "init", "modules", "parallel",
           "parameter",
           "utils"]

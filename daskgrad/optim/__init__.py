"""``daskgrad.optim``: torch's optimizers and schedulers; ``step()`` is lazy (submits nothing).

>>> opt = optim.Adam(model.parameters(), lr=1e-3)
"""
from . import lr_scheduler, swa_utils
from .adadelta import Adadelta
from .adafactor import Adafactor
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .adamax import Adamax
from .asgd import ASGD
from .lbfgs import LBFGS
from .nadam import NAdam
from .optimizer import Optimizer
from .radam import RAdam
from .rmsprop import RMSprop
from .rprop import Rprop
from .sgd import SGD

__all__ = ["ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS", "NAdam", "Optimizer",
           "RAdam", "RMSprop", "Rprop", "SGD", "lr_scheduler", "swa_utils"]

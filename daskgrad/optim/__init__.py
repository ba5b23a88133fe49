"""``daskgrad.optim``: torch's optimizers and schedulers; ``step()`` is lazy (submits nothing).

>>> opt = optim.Adam(model.parameters(), lr=1e-3)
"""
from . import lr_scheduler
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Adam", "AdamW", "Optimizer", "SGD", "lr_scheduler"]

"""``daskgrad.optim.swa_utils``: torch's Stochastic Weight Averaging and EMA helpers.

``AveragedModel`` keeps a copy of a model whose parameters (and, with ``use_buffers``, buffers) are running
averages of the model's, ``SWALR`` anneals each group's learning rate to a fixed ``swa_lr``, and ``update_bn``
recomputes the BatchNorm running statistics of a model with one pass over a loader.  The averages are lazy
in-place updates, as an optimizer step: ``update_parameters`` submits nothing.

>>> swa_model = optim.swa_utils.AveragedModel(model)
>>> swa_model.update_parameters(model)
"""
from __future__ import annotations

import itertools
import math
from copy import deepcopy

from .._modes import no_grad
from .._tensor import Tensor, zeros
from ..nn.module import Module
from ..nn.normalization import _BatchNorm, _InstanceNorm
from .lr_scheduler import LRScheduler, _format_param

__all__ = ["AveragedModel", "update_bn", "SWALR", "get_ema_multi_avg_fn", "get_swa_multi_avg_fn", "get_ema_avg_fn",
           "get_swa_avg_fn"]


def _is_float(t):
    return t.dtype.kind in "fc"


def _check_decay(decay):
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] range.")


def get_ema_multi_avg_fn(decay=0.999):
    """The exponential moving average over lists of parameters, in place:
    ``ema = decay * ema + (1 - decay) * model`` (a ``lerp_`` for floating tensors, as torch's).

    Parameters
    ----------
    decay : float
        In ``[0, 1]``.

    Returns
    -------
    callable
        ``fn(ema_params, model_params, num_averaged)``, for ``AveragedModel(multi_avg_fn=...)``.
    """
    _check_decay(decay)

    def ema_update(ema_param_list, current_param_list, _):
        with no_grad():
            if _is_float(ema_param_list[0]):
                for p_ema, p_model in zip(ema_param_list, current_param_list, strict=True):
                    p_ema.lerp_(p_model, 1 - decay)
            else:
                for p_ema, p_model in zip(ema_param_list, current_param_list, strict=True):
                    p_ema.copy_(p_ema * decay + p_model * (1 - decay))

    return ema_update


def get_swa_multi_avg_fn():
    """The equal-weight (SWA) average over lists of parameters, in place: ``avg += (model - avg) / (n + 1)``
    (a ``lerp_`` by ``1 / (n + 1)`` for floating tensors, as torch's).

    Returns
    -------
    callable
        ``fn(averaged_params, model_params, num_averaged)``, for ``AveragedModel(multi_avg_fn=...)``.
    """
    def swa_update(averaged_param_list, current_param_list, num_averaged):
        with no_grad():
            if _is_float(averaged_param_list[0]):
                weight = 1 / (num_averaged + 1)
                for p_avg, p_model in zip(averaged_param_list, current_param_list, strict=True):
                    p_avg.lerp_(p_model, weight)
            else:
                for p_avg, p_model in zip(averaged_param_list, current_param_list, strict=True):
                    diff = p_model - p_avg
                    if isinstance(num_averaged, Tensor):
                        p_avg.addcdiv_(diff, num_averaged + 1)
                    else:
                        p_avg.add_(diff, alpha=1.0 / (num_averaged + 1))

    return swa_update


def get_ema_avg_fn(decay=0.999):
    """The exponential moving average of one parameter: ``decay * ema + (1 - decay) * model``.

    Parameters
    ----------
    decay : float
        In ``[0, 1]``.

    Returns
    -------
    callable
        ``fn(ema_param, model_param, num_averaged)`` returning the new average, for ``AveragedModel(avg_fn=...)``.
    """
    _check_decay(decay)

    def ema_update(ema_param, current_param, num_averaged):
        with no_grad():
            return decay * ema_param + (1 - decay) * current_param

    return ema_update


def get_swa_avg_fn():
    """The equal-weight (SWA) average of one parameter: ``avg + (model - avg) / (n + 1)``.

    Returns
    -------
    callable
        ``fn(averaged_param, model_param, num_averaged)`` returning the new average.
    """
    def swa_update(averaged_param, current_param, num_averaged):
        with no_grad():
            return averaged_param + (current_param - averaged_param) / (num_averaged + 1)

    return swa_update


class AveragedModel(Module):
    """torch's ``AveragedModel``: a deep copy of ``model`` (in ``.module``) whose parameters are running
    averages of ``model``'s, SWA's equal weights unless ``avg_fn`` or ``multi_avg_fn`` says otherwise.

    Parameters
    ----------
    model : Module
        The model to average; it is copied.
    device : str, optional
        Where the copy lives.
    avg_fn : callable, optional
        ``avg_fn(averaged, current, num_averaged)`` returns one parameter's new average.
    multi_avg_fn : callable, optional
        ``multi_avg_fn(averaged_list, current_list, num_averaged)`` updates lists of parameters in place.
    use_buffers : bool
        Average the buffers too (else they are copied from ``model`` at each update).
    """

    def __init__(self, model, device=None, avg_fn=None, multi_avg_fn=None, use_buffers=False):
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", zeros((), dtype="int64", device=device))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers
        self._count = (id(self.n_averaged), self.n_averaged._version, 0)

    def forward(self, *args, **kwargs):
        """The copy's forward."""
        return self.module(*args, **kwargs)

    def _n_averaged(self):
        """``n_averaged`` as a Python int, known without computing while the buffer is the one this model
        last counted into (a loaded state dict or a user's write changes its version: then it is read)."""
        n = self.n_averaged
        key, version, count = self._count
        if key != id(n) or version != n._version:
            count = int(n.item())
        return count

    def update_parameters(self, model):
        """Average ``model``'s parameters (and buffers with ``use_buffers``) into the copy; the first call
        copies them.  Lazy: nothing is computed."""
        if self.use_buffers:
            self_param = list(itertools.chain(self.module.parameters(), self.module.buffers()))
            model_param = list(itertools.chain(model.parameters(), model.buffers()))
        else:
            self_param, model_param = list(self.parameters()), list(model.parameters())
        count = self._n_averaged()
        pairs = [(a.detach(), m.detach().to(a.device)) for a, m in zip(self_param, model_param)]
        with no_grad():
            if count == 0:
                for averaged, current in pairs:
                    averaged.copy_(current)
            elif self.avg_fn is not None:
                for averaged, current in pairs:
                    averaged.copy_(self.avg_fn(averaged, current, self.n_averaged))
            else:
                # grouped by dtype as torch's (a multi_avg_fn sees one dtype per call), first-seen order
                groups = {}
                for averaged, current in pairs:
                    group = groups.setdefault(str(averaged.dtype), ([], []))
                    group[0].append(averaged)
                    group[1].append(current)
                for averaged, current in groups.values():
                    if self.multi_avg_fn is not None:
                        self.multi_avg_fn(averaged, current, self.n_averaged)
                    else:  # torch's CPU default: the single-tensor SWA average, the same bits
                        avg_fn = get_swa_avg_fn()
                        for a, c in zip(averaged, current, strict=True):
                            a.copy_(avg_fn(a, c, self.n_averaged))
            if not self.use_buffers:
                for b_swa, b_model in zip(self.module.buffers(), model.buffers(), strict=True):
                    b_swa.detach().copy_(b_model.detach().to(b_swa.device))
            self.n_averaged += 1
        self._count = (id(self.n_averaged), self.n_averaged._version, count + 1)


def _batch_norms(model):
    """torch's ``_BatchNorm`` modules (daskgrad's instance norms derive from its BatchNorm: not them)."""
    return [m for m in model.modules() if isinstance(m, _BatchNorm) and not isinstance(m, _InstanceNorm)]


def update_bn(loader, model, device=None):
    """Recompute the running statistics of every BatchNorm of ``model``: reset them, then one pass over
    ``loader`` in training mode with ``momentum=None`` (cumulative averages), as torch's.

    Parameters
    ----------
    loader : iterable
        Batches: a tensor, or a list/tuple whose first element is the input.
    model : Module
        Its BatchNorm layers' buffers are updated (lazily); momenta and training mode are restored.
    device : str, optional
        Where each batch is moved before the forward.
    """
    momenta = {}
    for module in _batch_norms(model):
        module.reset_running_stats()
        momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    with no_grad():
        for input in loader:
            if isinstance(input, (list, tuple)):
                input = input[0]
            if device is not None:
                input = input.to(device)
            model(input)
    for module, momentum in momenta.items():
        module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """torch's ``SWALR``: anneals each group's learning rate from its value to ``swa_lr`` over
    ``anneal_epochs`` steps (``"cos"`` or ``"linear"``), then keeps it there.

    Parameters
    ----------
    optimizer : Optimizer
        Its groups get a ``"swa_lr"`` entry.
    swa_lr : float or list of float
        The final learning rate, for all groups or one per group.
    anneal_epochs : int
        Steps of annealing (0: jump at once).
    anneal_strategy : {"cos", "linear"}
        The annealing curve.
    last_epoch : int
        The index of the last epoch.
    """

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos", last_epoch=-1):
        swa_lrs = _format_param("swa_lr", optimizer, swa_lr)
        for value, group in zip(swa_lrs, optimizer.param_groups, strict=True):
            group["swa_lr"] = value
        if anneal_strategy not in ["cos", "linear"]:
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _cosine_anneal(t):
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self):
        """The next learning rates (torch's recursive form: the previous alpha is undone first)."""
        self._warn_outside_step()
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_t = max(0, min(1, (step - 1) / max(1, self.anneal_epochs)))
        prev_alpha = self.anneal_func(prev_t)
        prev_lrs = [self._get_initial_lr(group["lr"], group["swa_lr"], prev_alpha)
                    for group in self.optimizer.param_groups]
        t = max(0, min(1, step / max(1, self.anneal_epochs)))
        alpha = self.anneal_func(t)
        return [group["swa_lr"] * alpha + lr * (1 - alpha)
                for group, lr in zip(self.optimizer.param_groups, prev_lrs, strict=True)]

    def _set_anneal_func(self, anneal_strategy):
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal

    def state_dict(self):
        """Every attribute but the optimizer and ``anneal_func`` (rebuilt from ``_anneal_strategy``)."""
        return {key: value for key, value in self.__dict__.items() if key not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict):
        """Load a dict from :meth:`state_dict`."""
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)

"""Learning-rate schedulers: torch's ``StepLR`` and ``CosineAnnealingLR`` (recursive forms).

>>> sched = optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
>>> for epoch in range(n): train(); opt.step(); sched.step()
"""
from __future__ import annotations

import math


class LRScheduler:
    def __init__(self, optimizer, last_epoch=-1):
        self.optimizer = optimizer
        for i, group in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when resuming an optimizer")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self._is_initial = True
        self.step()
        self._is_initial = False

    def get_lr(self):
        raise NotImplementedError

    def get_last_lr(self):
        return self._last_lr

    def step(self):
        self._step_count += 1
        self.last_epoch += 1
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` epochs."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [group["lr"] for group in self.optimizer.param_groups]
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]


class CosineAnnealingLR(LRScheduler):
    """Cosine from the initial lr down to ``eta_min`` over ``T_max`` epochs (and back up after)."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        groups, eta_min, t_max = self.optimizer.param_groups, self.eta_min, self.T_max
        if self._is_initial:
            return [g["lr"] for g in groups]
        if self._step_count == 1 and self.last_epoch > 0:
            return [eta_min + (base - eta_min) * (1 + math.cos(self.last_epoch * math.pi / t_max)) / 2
                    for base in self.base_lrs]
        if (self.last_epoch - 1 - t_max) % (2 * t_max) == 0:
            return [g["lr"] + (base - eta_min) * (1 - math.cos(math.pi / t_max)) / 2
                    for base, g in zip(self.base_lrs, groups)]
        epoch = self.last_epoch
        ratio = (1 + math.cos(math.pi * epoch / t_max)) / (1 + math.cos(math.pi * (epoch - 1) / t_max))
        return [ratio * (g["lr"] - eta_min) + eta_min for g in groups]

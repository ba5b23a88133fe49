"""torch.nn.parallel's wrappers, ``DataParallel`` and ``DistributedDataParallel``: a module around a module
whose forward is the inner module's.

torch's split a batch across GPUs (or processes) and gather or all-reduce the results.  In daskgrad a batch
is one chunked tensor whose chunks already run in parallel on every worker of the cluster, and a parameter's
gradient already sums every chunk's part: the parallelism these wrappers add in torch is there without them.
They exist so that code written for torch runs unchanged: ``.module``, ``state_dict`` keys prefixed
``module.``, forward passed through.

>>> model = nn.DataParallel(nn.Linear(4, 3))
>>> list(model.state_dict())
['module.weight', 'module.bias']
"""
from __future__ import annotations

import contextlib

from .module import Module

__all__ = ["DataParallel", "DistributedDataParallel"]


class DataParallel(Module):
    """torch's ``DataParallel(module, device_ids=None, output_device=None, dim=0)``: ``forward`` calls
    ``module``.  dask's chunks are the data parallelism (see the module's note), so this behaves as torch's
    does where no GPU is found: ``device_ids`` is ``[]`` and the other arguments are not kept."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        self.module = module
        self.device_ids = []

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


class DistributedDataParallel(Module):
    """torch's ``DistributedDataParallel``: ``forward`` calls ``module``; :meth:`no_sync` is the context in
    which torch skips the gradient all-reduce.

    torch's all-reduces each parameter's gradient across the processes of a process group, and raises
    without one (``Default process group has not been initialized``).  A daskgrad batch is one tensor over
    every worker, whose gradients already sum all of it, so there is nothing to synchronise and no process
    group is needed: this wrapper computes where torch's would raise for the lack of one.  Gradients
    accumulated inside :meth:`no_sync` and after it add up as torch's do once synchronised."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=None, init_sync=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, delay_all_reduce_named_params=None,
                 param_to_hook_all_reduce=None, mixed_precision=None, device_mesh=None,
                 skip_all_reduce_unused_params=False, bucket_cap_mb_list=None, batched_grad_copy=False,
                 forward_sync_buffers=None):
        super().__init__()
        self.module = module
        self.device_ids, self.output_device, self.dim = device_ids, output_device, dim
        self.process_group = process_group
        self.find_unused_parameters, self.static_graph = find_unused_parameters, static_graph
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.require_backward_grad_sync = True

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Within it, torch accumulates gradients without all-reducing them (``require_backward_grad_sync``
        is False); here gradients are whole-batch already, so it only sets that flag, as torch's."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

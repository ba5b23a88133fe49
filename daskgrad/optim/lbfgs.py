"""L-BFGS: torch's ``torch.optim.LBFGS`` (minFunc's), with its vectors chunked on the cluster.

torch works on one flat vector of all parameters; here a "vector" is a tuple of tensors, one per
parameter, shaped and chunked like it.  The history (``old_dirs``, ``old_stps``), the direction
``d`` and the gradients stay where the parameters are: each is written in place into a tensor made
like its parameter, so the next submission stores it (no lineage, no gather).  Only the scalars
torch turns into Python numbers too (dot products, max-norms, the loss) come back to the client, a
few per submission; the two-loop recursion is one lazy graph whose scalars are computed on the cluster.

>>> opt = optim.LBFGS([w], line_search_fn="strong_wolfe")
>>> def closure():
...     opt.zero_grad(); loss = f(w); loss.backward(); return loss
>>> opt.step(closure)                  # the first evaluation's loss, as torch's
tensor(14.0775, grad_fn=<SumBackward0>)
"""
from __future__ import annotations

import math
from functools import reduce

from .._lbfgsb import _floats  # lazy 0-d tensors as floats, one submission
from .._modes import enable_grad, no_grad
from .._tensor import Tensor
from ..ops import maximum, zeros_like
from ..nn.module import _host
from .optimizer import Optimizer, _state_value


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """torch's (minFunc's polyinterp): the minimiser of the cubic through two points with slopes."""
    xmin_bound, xmax_bound = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square >= 0:
        d2 = math.sqrt(d2_square)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func, t, f, g, gtd, d_norm, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """torch's strong-Wolfe line search; ``obj_func(t)`` returns loss, gradient and directional slope.

    Long because it is torch's ``_strong_wolfe`` ported statement for statement, so that it tries the
    same steps in the same order (the gradients it keeps are tensors on the cluster, never copied)."""
    f_new, g_new, gtd_new = obj_func(t)
    ls_func_evals = 1
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f, bracket_g, bracket_gtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], \
                [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f, bracket_g, bracket_gtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], \
                [gtd_prev, gtd_new]
            break
        min_step, max_step, tmp = t + 0.01 * (t - t_prev), t * 10, t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new, gtd_new
        f_new, g_new, gtd_new = obj_func(t)
        ls_func_evals += 1
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]
    # zoom: refine the bracket until a point satisfies the conditions
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1])
        # too close to an end of the bracket (twice, or outside it): 0.1 of its length away instead
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                t = max(bracket) - eps if abs(t - max(bracket)) < abs(t - min(bracket)) else min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new, gtd_new = obj_func(t)
        ls_func_evals += 1
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos], bracket_g[high_pos], bracket_gtd[high_pos] = \
                t, f_new, g_new, gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos], bracket_g[high_pos], bracket_gtd[high_pos] = \
                    bracket[low_pos], bracket_f[low_pos], bracket_g[low_pos], bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos], bracket_g[low_pos], bracket_gtd[low_pos] = t, f_new, g_new, gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


# ---------------------------------------------------------------- vectors: one tensor per parameter
def _dot(a, b):
    """Lazy 0-d ``a . b`` summed over the parameters' pieces."""
    return reduce(lambda x, y: x + y, [(u * v).sum() for u, v in zip(a, b)])


def _abs_max(a):
    return reduce(maximum, [u.abs().max() for u in a])


def _abs_sum(a):
    return reduce(lambda x, y: x + y, [u.abs().sum() for u in a])


class LBFGS(Optimizer):
    """torch's L-BFGS (one parameter group; ``line_search_fn`` None or ``"strong_wolfe"``)."""

    def __init__(self, params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7, tolerance_change=1e-9,
                 history_size=100, line_search_fn=None):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval, tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change, history_size=history_size,
                                      line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def load_state_dict(self, state_dict):
        """Ours, or torch's: its flat vectors are split into one tensor per parameter (made like it,
        copied in lazily) and its 0-d tensors become numbers."""
        saved = state_dict["state"]
        if 0 in saved:
            state = dict(saved[0])
            for key in ("d", "prev_flat_grad"):
                if key in state:
                    state[key] = self._vector(state[key])
            for key in ("old_dirs", "old_stps"):
                if key in state:
                    state[key] = [self._vector(v) for v in state[key]]
            for key in ("ro", "al"):
                if key in state:
                    state[key] = [None if v is None else float(v) for v in state[key]]
            for key in ("t", "H_diag", "prev_loss"):
                if state.get(key) is not None:
                    state[key] = float(state[key])
            state_dict = {**state_dict, "state": {**saved, 0: state}}
        super().load_state_dict(state_dict)

    def _vector(self, value):
        """A saved vector as ours: a tuple of per-parameter tensors, or torch's flat vector cut up."""
        if isinstance(value, (tuple, list)):
            return tuple(_state_value("vector", v, p) for v, p in zip(value, self._params))
        flat, pieces, offset = _host(value).reshape(-1), [], 0
        for p in self._params:
            pieces.append(_state_value("vector", flat[offset:offset + p.numel()].reshape(p.shape), p))
            offset += p.numel()
        return tuple(pieces)

    def _stored(self, vec):
        """``vec`` written in place into tensors made like the parameters: the next submission stores
        it chunked like them, and nothing later recomputes it."""
        return tuple(zeros_like(p).copy_(v) for p, v in zip(self._params, vec))

    def _flat_grad(self):
        """The gradients as a vector (zeros for a parameter without one); new tensors over the same
        values, so a later in-place write to ``p.grad`` does not change it (torch's ``cat`` copies)."""
        return tuple(zeros_like(p) if p.grad is None else Tensor._make(p.grad.array) for p in self._params)

    def _add_grad(self, step_size, update):
        for p, u in zip(self._params, update):
            p += step_size * u

    def _directional_evaluate(self, closure, x, t, d):
        """Loss, gradient and slope along ``d`` at ``x + t d``; the parameters are put back to ``x``."""
        self._add_grad(t, d)
        with enable_grad():
            loss = float(closure().detach())
        flat_grad = self._flat_grad()
        for p, v in zip(self._params, x):
            p.copy_(v)
        (gtd,) = _floats(_dot(flat_grad, d))
        return loss, flat_grad, gtd

    def _direction(self, state, flat_grad, history_size):
        """torch's L-BFGS update of the memory and two-loop recursion: the new direction ``d``,
        stored like the parameters, and the lazy ``al`` scalars of the first loop."""
        if state["n_iter"] == 1:
            state.update(old_dirs=[], old_stps=[], ro=[], H_diag=1)
            return self._stored(-g for g in flat_grad), []
        old_dirs, old_stps, ro = state["old_dirs"], state["old_stps"], state["ro"]
        y = self._stored(g - pg for g, pg in zip(flat_grad, state["prev_flat_grad"]))
        s = self._stored(v * state["t"] for v in state["d"])
        ys, yy = _floats(_dot(y, s), _dot(y, y))
        if ys > 1e-10:
            if len(old_dirs) == history_size:  # limited memory: forget the oldest pair
                old_dirs.pop(0), old_stps.pop(0), ro.pop(0)
            old_dirs.append(y), old_stps.append(s), ro.append(1.0 / ys)
            state["H_diag"] = ys / yy
        al = [None] * len(old_dirs)
        q = [-g for g in flat_grad]
        for i in range(len(old_dirs) - 1, -1, -1):
            al[i] = _dot(old_stps[i], q) * ro[i]
            q = [u - al[i] * v for u, v in zip(q, old_dirs[i])]
        r = [u * state["H_diag"] for u in q]
        for i in range(len(old_dirs)):
            be_i = _dot(old_dirs[i], r) * ro[i]
            r = [u + (al[i] - be_i) * v for u, v in zip(r, old_stps[i])]
        return self._stored(r), al

    def step(self, closure):
        """Up to ``max_iter`` L-BFGS iterations; returns the loss ``closure()`` gave first.

        Long because it is torch's ``LBFGS.step``, statement for statement, so that it stops where
        torch's does."""
        if len(self.param_groups) != 1:
            raise AssertionError(f"Expected exactly one param_group, but got {len(self.param_groups)}")
        group = self.param_groups[0]
        lr = float(group["lr"])
        max_iter, max_eval, history_size = group["max_iter"], group["max_eval"], group["history_size"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn = group["line_search_fn"]
        state = self.state[self._params[0]]  # torch's place for LBFGS's global state
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        def evaluate():
            with enable_grad():
                orig = closure()
            return orig, float(orig.detach()), self._flat_grad()

        orig_loss, loss, flat_grad = evaluate()
        current_evals = 1
        state["func_evals"] += 1
        with no_grad():
            if _floats(_abs_max(flat_grad))[0] <= tolerance_grad:
                return orig_loss
            n_iter = 0
            while n_iter < max_iter:
                n_iter += 1
                state["n_iter"] += 1
                d, al = self._direction(state, flat_grad, history_size)
                state["d"], state["prev_flat_grad"], state["prev_loss"] = d, flat_grad, loss
                first = state["n_iter"] == 1
                gtd, d_norm, *rest = _floats(_dot(flat_grad, d), _abs_max(d), *([_abs_sum(flat_grad)] if first else []),
                                             *al)
                if not first:  # torch's al: history_size slots, the first len(old_dirs) filled
                    state["al"] = rest[len(rest) - len(al):] + [None] * (history_size - len(al))
                t = state["t"] = min(1.0, 1.0 / rest[0]) * lr if first else lr
                if gtd > -tolerance_change:
                    break
                ls_func_evals = 0
                opt_cond = False
                if line_search_fn is not None:
                    if line_search_fn != "strong_wolfe":
                        raise RuntimeError("only 'strong_wolfe' is supported")
                    x_init = tuple(Tensor._make(p.array) for p in self._params)
                    loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                        lambda t_: self._directional_evaluate(closure, x_init, t_, d), t, loss, flat_grad, gtd,
                        d_norm, max_ls=max_eval - current_evals)
                    state["t"] = t
                    self._add_grad(t, d)
                    opt_cond = _floats(_abs_max(flat_grad))[0] <= tolerance_grad
                else:
                    self._add_grad(t, d)
                    if n_iter != max_iter:
                        _, loss, flat_grad = evaluate()
                        opt_cond = _floats(_abs_max(flat_grad))[0] <= tolerance_grad
                        ls_func_evals = 1
                current_evals += ls_func_evals
                state["func_evals"] += ls_func_evals
                if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                    break
                if d_norm * abs(t) <= tolerance_change:  # max|d t| (rounding is monotone: the same number)
                    break
                if abs(loss - state["prev_loss"]) < tolerance_change:
                    break
        return orig_loss

"""``torch.func``'s transforms: ``grad``, ``grad_and_value``, ``vjp``, ``jvp``, ``linearize``, ``jacrev``, ``jacfwd``,
``hessian``, functions in, functions out; and ``functional_call``, ``stack_module_state``.

``grad(f)(*args)`` is the gradient of the scalar ``f(*args)`` with respect to ``args[argnums]``,
taken with :func:`daskgrad.autograd.grad` on fresh leaves holding the arguments' values (an
argument need not require grad; one that does keeps its graph, so transforms nest).  Composed with
:func:`daskgrad.compile` it is a training step traced once and replayed, as ``jax.jit(jax.grad(f))``::

    step = dg.compile(dg.func.grad_and_value(loss))
    g, value = step(w, X, y)
"""
from __future__ import annotations

import functools

from .engine import grad as _autograd_grad
from .graph import AccumulateGrad, size_repr
from ._modes import enable_grad
from .ops import clone, eye, stack, zeros_like
from ._tensor import Tensor


def grad(func, argnums=0, has_aux=False):
    """``torch.func.grad``: a function returning the gradient of ``func`` (and its aux output)."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, (_, aux) = _grad_and_value(func, argnums, args, kwargs, has_aux)
        return (g, aux) if has_aux else g
    return wrapper


def grad_and_value(func, argnums=0, has_aux=False):
    """``torch.func.grad_and_value``: a function returning ``(gradient, value)`` of ``func``."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, (value, aux) = _grad_and_value(func, argnums, args, kwargs, has_aux)
        return (g, (value, aux)) if has_aux else (g, value)
    return wrapper


def _grad_and_value(func, argnums, args, kwargs, has_aux):
    name = "grad_and_value"  # (torch.func.grad's errors say so too: it calls grad_and_value)
    positions = _argnums(argnums, len(args))
    with enable_grad():
        args, fresh, diff = list(args), set(), []
        for i in positions:
            args[i] = _map(args[i], lambda x: _differentiable(x, fresh, diff), every_leaf=True)
        output = func(*args, **kwargs)
        aux = None
        if has_aux:
            if not (isinstance(output, tuple) and len(output) == 2):
                raise RuntimeError(f"{name}(f)(*args): output of function f should be a tuple: (output, aux) "
                                   "if has_aux is True")
            output, aux = output
        if not isinstance(output, Tensor):
            raise RuntimeError(f"{name}(f)(*args): Expected f(*args) to return a Tensor, got {type(output)}")
        if output.ndim != 0:
            raise RuntimeError(f"{name}(f)(*args): Expected f(*args) to return a scalar Tensor, got tensor with "
                               f"{output.ndim} dims. Maybe you wanted to use the vjp or jacrev APIs instead?")
        # the gradients stay differentiable where the output reaches a tensor requiring grad from
        # outside (an outer transform's input, a weight the function closes over): torch's levels
        outer = _reaches_outside([output], fresh)
        if output.requires_grad:
            grads = iter(_autograd_grad(output, diff, allow_unused=True, materialize_grads=True, create_graph=outer))
        else:  # a constant output: zeros, as torch gives
            grads = iter([zeros_like(x.detach()) for x in diff])
    g = tuple(_map(args[i], lambda _: next(grads), every_leaf=True) for i in positions)
    if not outer:
        output, aux = output.detach(), _map(aux, lambda x: x.detach())
    return (g if isinstance(argnums, tuple) else g[0]), (output, aux)


def _differentiable(x, fresh, diff):
    """A tensor to differentiate with respect to, standing for ``x`` at this position only: a leaf
    holding its values, or (if ``x`` requires grad) an identity op on it, so the outer graph goes on."""
    if not isinstance(x, Tensor):
        raise ValueError(f"Thing passed to transform API must be Tensor, got {type(x)}")
    if x.requires_grad:
        alias = clone(x)
    else:
        alias = x.detach().requires_grad_()
        fresh.add(id(alias))
    diff.append(alias)
    return alias


def _map(tree, fn, every_leaf=False):
    """``fn`` on every tensor (``every_leaf``: every value) of a nested tuple, list or dict, in order;
    other values kept."""
    if type(tree) in (tuple, list):
        return type(tree)(_map(t, fn, every_leaf) for t in tree)
    if type(tree) is dict:
        return {k: _map(v, fn, every_leaf) for k, v in tree.items()}
    return fn(tree) if every_leaf or isinstance(tree, Tensor) else tree


def _argnums(argnums, n):
    """``argnums`` checked and wrapped as torch does, as a tuple of positions."""
    if not isinstance(argnums, (int, tuple)):
        raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    out = []
    for a in (argnums,) if isinstance(argnums, int) else argnums:
        if not isinstance(a, int):
            raise RuntimeError(f"argnum must be int, got: {type(a)}")
        if not -n <= a < n:
            raise RuntimeError(f"Got argnum={a}, but only {n} positional inputs")
        out.append(a % n)
    if isinstance(argnums, tuple):
        if not out:
            raise RuntimeError("argnums must be non-empty")
        if len(set(out)) != len(out):
            raise RuntimeError(f"argnums elements must be unique, got {tuple(out)}")
    return tuple(out)


# ------------------------------------------------------------------ vjp, jvp, Jacobians
def _differentiated(primals, positions):
    """``primals`` with the tensors at ``positions`` (pytrees) replaced by tensors to differentiate
    with respect to (:func:`_differentiable`): the new list, the ids of the fresh leaves, the tensors in order."""
    args, fresh, diff = list(primals), set(), []
    for i in positions:
        args[i] = _map(args[i], lambda x: _differentiable(x, fresh, diff), every_leaf=True)
    return args, fresh, diff


def _reaches_outside(outputs, fresh):
    """Whether a graph of ``outputs`` reaches a tensor requiring grad from outside the transform (an
    outer transform's input, a weight the function closes over): the results then stay differentiable.
    A walk that stops at the first such leaf, not a toposort (a small step's ``grad_and_value`` walks
    its graph once more in the backward)."""
    stack = [o.grad_fn for o in outputs if o.grad_fn is not None]
    seen = set(stack)
    while stack:
        n = stack.pop()
        if isinstance(n, AccumulateGrad) and id(n.variable) not in fresh:
            return True
        for child, _ in n.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                stack.append(child)
    return False


def _leaves(tree):
    """The tensors of a pytree, in order."""
    out = []
    _map(tree, out.append)
    return out


def _structure_of(tree):
    """A pytree's structure (tensors as one mark), to compare two trees as torch's pytree does."""
    return _map(tree, lambda x: "T" if isinstance(x, Tensor) else type(x).__name__, every_leaf=True)


def _split_aux(name, output, has_aux):
    if not has_aux:
        return output, None
    if not (isinstance(output, tuple) and len(output) == 2):
        raise RuntimeError(f"{name}(f, ...): output of function f should be a tuple: (output, aux) if has_aux is True")
    return output


def _check_outputs(name, output):
    for o in _leaves(output) if type(output) in (tuple, list, dict) else [output]:
        if not isinstance(o, Tensor):
            raise RuntimeError(f"{name}(f, ...): Expected f(*primals) to return only tensors, got unsupported type "
                               f"{type(o)}")


def vjp(func, *primals, has_aux=False):
    """``torch.func.vjp``: ``(func(*primals), vjp_fn)`` (and the aux output); ``vjp_fn(cotangents)``
    gives one cotangent per primal (pytrees as the primals), and may be called many times."""
    with enable_grad():
        args, fresh, diff = _differentiated(primals, range(len(primals)))
        output, aux = _split_aux("vjp", func(*args), has_aux)
        _check_outputs("vjp", output)
    outputs = _leaves(output)
    outer = _reaches_outside(outputs, fresh)

    def vjp_fn(cotangents, *, retain_graph=True, create_graph=None):
        if _structure_of(cotangents) != _structure_of(output):
            raise RuntimeError("Expected pytree structure of cotangents to be the same as pytree structure of "
                               "outputs to the function")
        cots = _leaves(cotangents)
        for o, c in zip(outputs, cots):
            if tuple(o.shape) != tuple(c.shape):
                raise RuntimeError(f"Mismatch in shape: grad_output[0] has a shape of {c.shape} and output[0] has a "
                                   f"shape of {o.shape}.")
        wanted = [(o, c) for o, c in zip(outputs, cots) if o.requires_grad]
        with enable_grad():
            grads = iter(_autograd_grad([o for o, _ in wanted], diff, [c for _, c in wanted], retain_graph=True,
                                        allow_unused=True, materialize_grads=True,
                                        create_graph=outer if create_graph is None else create_graph)
                         if wanted else [zeros_like(x.detach()) for x in diff])
        return tuple(_map(a, lambda _: next(grads), every_leaf=True) for a in args)

    out = output if outer else _map(output, lambda x: x.detach())
    return (out, vjp_fn) if not has_aux else (out, vjp_fn, aux if outer else _map(aux, lambda x: x.detach()))


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """``torch.func.jvp``: ``(func(*primals), J @ tangents)`` (and the aux output), by differentiating
    a vjp with respect to its cotangent (daskgrad has no forward mode; the numbers are the same)."""
    if not isinstance(primals, tuple):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals to be a tuple. E.g. it should be valid to "
                           "call f(*primals).")
    if not isinstance(tangents, tuple) or len(tangents) != len(primals):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to have the same python "
                           "structure. For example, if primals is a tuple of 3 tensors, tangents also must be. Got "
                           f"primals with structure {_structure_of(primals)} and tangents with structure "
                           f"{_structure_of(tangents)}")
    with enable_grad():
        args, fresh, diff = _differentiated(primals, range(len(primals)))
        output, aux = _split_aux("jvp", func(*args), has_aux)
        _check_outputs("jvp", output)
        outputs = _leaves(output)
        outer = _reaches_outside(outputs, fresh)
        dummies, back = _vjp_of_vjp(outputs, diff)
        res = _pushed(outputs, dummies, back, _leaves(tangents), create_graph=outer)
    res = iter(res)
    jvp_out = _map(output, lambda _: next(res))
    if not outer:
        output, aux = _map(output, lambda x: x.detach()), _map(aux, lambda x: x.detach())
    return (output, jvp_out) if not has_aux else (output, jvp_out, aux)


def linearize(func, *primals):
    """``torch.func.linearize``: ``(func(*primals), jvp_fn)``, ``jvp_fn(*tangents)`` the Jacobian-vector
    product at ``primals``, recorded once (the vjp's graph kept) and called for any number of tangents."""
    with enable_grad():
        args, fresh, diff = _differentiated(primals, range(len(primals)))
        output = func(*args)
        _check_outputs("linearize", output)
        outputs = _leaves(output)
        dummies, back = _vjp_of_vjp(outputs, diff)

    def jvp_fn(*tangents):
        flat = _leaves(tangents)
        if _structure_of(tangents) != _structure_of(tuple(primals)):
            raise RuntimeError(f"Expected the tangents {_structure_of(tangents)} to have the same argspec as the "
                               f"primals {_structure_of(tuple(primals))}")
        for i, (t, x) in enumerate(zip(flat, diff)):
            if tuple(t.shape) != tuple(x.shape):
                raise RuntimeError(f"tangent:{i} with shape {size_repr(t.shape)} in flattened pytree doesn't match "
                                   f"the shape {size_repr(x.shape)} of the corresponding primal.")
        res = iter(_pushed(outputs, dummies, back, flat, retain_graph=True))
        return _map(output, lambda _: next(res).detach())

    return _map(output, lambda x: x.detach()), jvp_fn


def _vjp_of_vjp(outputs, diff):
    """Forward mode by reverse mode twice: ``(dummies, back)``, ``back`` the vjp of ``outputs`` at
    cotangents ``dummies`` (zeros that require grad), recorded with its graph, with respect to the
    differentiated inputs ``diff``.  ``back`` is linear in the dummies, so its vjp with respect to
    them at a tangent is the Jacobian-vector product (:func:`_pushed`); the dummies' value does not
    matter, only that it is finite."""
    dummies = [zeros_like(o.detach()).requires_grad_() for o in outputs]
    wanted = [(o, d) for o, d in zip(outputs, dummies) if o.requires_grad]
    back = (_autograd_grad([o for o, _ in wanted], diff, [d for _, d in wanted], create_graph=True,
                           allow_unused=True, materialize_grads=True) if wanted else ())
    return dummies, back


def _pushed(outputs, dummies, back, tangents, **kwargs):
    """The Jacobian-vector product of each of ``outputs`` at ``tangents`` (one per differentiated input),
    from :func:`_vjp_of_vjp`'s ``dummies`` and ``back``: zeros where no output depends on an input."""
    pairs = [(b, t) for b, t in zip(back, tangents) if b.requires_grad]
    if not pairs:
        return [zeros_like(o.detach()) for o in outputs]
    return _autograd_grad([b for b, _ in pairs], dummies, [t for _, t in pairs], allow_unused=True,
                          materialize_grads=True, **kwargs)


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False):
    """``torch.func.jacrev``: a function returning the Jacobian of ``func`` with respect to
    ``args[argnums]``: for each output, ``out.shape + arg.shape`` (pytrees as the output and the
    arguments), every row a vjp with a one-hot cotangent, all rows of an output one batched backward."""
    if chunk_size is not None and chunk_size <= 0:
        raise ValueError("jacrev: `chunk_size` should be greater than 0.")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        positions = _argnums(argnums, len(args))
        with enable_grad():
            args, fresh, diff = _differentiated(args, positions)
            output, aux = _split_aux("jacrev", func(*args, **kwargs), has_aux)
            _check_outputs("jacrev", output)
            outputs = _leaves(output)
            outer = _reaches_outside(outputs, fresh)
            per_output = [_rows_of(o, diff, outer) for o in outputs]
        rows = iter(per_output)
        jac = _map(output, lambda _: _per_argument(next(rows), args, positions, argnums))
        if not has_aux:
            return jac
        return jac, (aux if outer else _map(aux, lambda x: x.detach()))
    return wrapper


def _rows_of(out, diff, outer):
    """The Jacobian of ``out`` with respect to each tensor of ``diff``: ``out.shape + x.shape``."""
    n = out.numel()
    if not out.requires_grad or n == 0:
        return [zeros_like(x.detach()).reshape(-1)[:0].reshape(tuple(out.shape) + tuple(x.shape)) if n == 0 else
                zeros_like(x.detach()).expand(tuple(out.shape) + tuple(x.shape)).clone() for x in diff]
    basis = eye(n, dtype=out.dtype).reshape((n,) + tuple(out.shape))
    grads = _autograd_grad(out, diff, basis, retain_graph=True, create_graph=outer, allow_unused=True,
                           materialize_grads=True, is_grads_batched=True)
    return [g.reshape(tuple(out.shape) + tuple(x.shape)) if outer else
            g.detach().reshape(tuple(out.shape) + tuple(x.shape)) for g, x in zip(grads, diff)]


def _per_argument(rows, args, positions, argnums):
    """One output's rows (one per differentiated tensor, in order) laid out as the arguments: a tuple
    over ``argnums`` when it is a tuple, each argument's pytree of Jacobians."""
    rows = iter(rows)
    out = tuple(_map(args[i], lambda _: next(rows), every_leaf=True) for i in positions)
    return out if isinstance(argnums, tuple) else out[0]


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """``torch.func.jacfwd``: the same Jacobian as :func:`jacrev` (daskgrad has no forward mode: it is
    taken in reverse mode, with the same numbers and layout)."""
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or 'same'. Got {randomness}")
    return jacrev(func, argnums, has_aux=has_aux)


def hessian(func, argnums=0):
    """``torch.func.hessian``: the Jacobian of the Jacobian of ``func`` (torch's ``jacfwd(jacrev(func))``)."""
    return jacfwd(jacrev(func, argnums), argnums)


# ------------------------------------------------------------------ modules as functions
def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights=True, strict=False):
    """``torch.func.functional_call``: ``module(*args, **kwargs)`` with its parameters and buffers named
    in ``parameter_and_buffer_dicts`` (a dict, or a sequence of dicts) replaced by the given tensors for
    the call only; a tied tensor given under one of its names is replaced under all (``tie_weights``)."""
    if isinstance(parameter_and_buffer_dicts, dict):
        values = dict(parameter_and_buffer_dicts)
    elif isinstance(parameter_and_buffer_dicts, (list, tuple)):
        if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
            raise ValueError("Expected all elements of parameter_and_buffer_dicts to be dictionaries")
        counts = {}
        for d in parameter_and_buffer_dicts:
            for k in d:
                counts[k] = counts.get(k, 0) + 1
        repeated = [k for k, n in counts.items() if n > 1]
        if repeated:
            raise ValueError(f"{repeated} appeared in multiple dictionaries; behavior of functional call is "
                             "ambiguous")
        values = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError("Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of dicts, but got "
                         f"{type(parameter_and_buffer_dicts)}")
    args = () if args is None else args if isinstance(args, tuple) else (args,)
    named = list(module.named_parameters(remove_duplicate=False)) + list(module.named_buffers(remove_duplicate=False))
    if strict:
        valid = {n for n, _ in named}
        missing, unexpected = sorted(valid - set(values)), sorted(set(values) - valid)
        errors = ([f"Unexpected key(s): {', '.join(map(repr, unexpected))}."] if unexpected else []) + \
                 ([f"Missing key(s): {', '.join(map(repr, missing))}."] if missing else [])
        if errors:
            raise RuntimeError("Error(s) in reparametrizing for {}:\n\t{}".format(type(module).__name__,
                                                                                "\n\t".join(errors)))
    swaps = _untied(named, values) if tie_weights else values
    saved = []
    try:
        for name, value in swaps.items():
            saved.append((name, _swap(module, name, value)))
        return module(*args, **(kwargs or {}))
    finally:
        for name, old in reversed(saved):
            _swap(module, name, old)


def _untied(named, values):
    """``values`` with each tensor the module holds under several names given under all of them."""
    names_of = {}
    for n, t in named:
        names_of.setdefault(id(t), []).append(n)
    out = dict(values)
    for names in names_of.values():
        given = [n for n in names if n in values]
        if len(names) < 2 or not given:
            continue
        if len({id(values[n]) for n in given}) > 1:
            raise ValueError(f"functional_call got multiple values for keys {sorted(given)}, which are tied. "
                             "Consider using tie_weights=False")
        out.update({n: values[given[0]] for n in names})
    return out


_MISSING = object()


def _swap(module, name, value):
    """Put ``value`` under the dotted ``name`` of ``module`` (a parameter, buffer or attribute; ``_MISSING``
    removes it) and return what was there."""
    *path, last = name.split(".")
    for p in path:
        module = getattr(module, p)
    if value is not _MISSING and value is not None and not isinstance(value, Tensor):
        raise TypeError(f"{value} is not an instance of torch.Tensor")
    for table in (module._parameters, module._buffers):
        if last in table:
            old = table[last]
            if value is _MISSING:
                del table[last]
            else:
                table[last] = value
            return old
    old = getattr(module, last, _MISSING)
    if value is _MISSING:
        if old is not _MISSING:
            delattr(module, last)
    else:
        object.__setattr__(module, last, value)
    return old


def stack_module_state(models):
    """``torch.func.stack_module_state``: ``(params, buffers)``, each name's tensors of ``models``
    stacked along a new first axis (the parameters detached and requiring grad again, as torch's)."""
    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if not (all(m.training for m in models) or all(not m.training for m in models)):
        raise RuntimeError("stack_module_state: Expected all models to have the same training/eval mode.")
    kind = type(models[0])
    if not all(type(m) is kind for m in models):
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")
    params = {k: stack([dict(m.named_parameters())[k] for m in models]).detach().requires_grad_()
              for k, _ in models[0].named_parameters()}
    buffers = {k: stack([dict(m.named_buffers())[k] for m in models]) for k, _ in models[0].named_buffers()}
    return params, buffers

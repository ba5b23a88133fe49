"""Small public example programs, each in its original framework and ported to daskgrad as a user
would write it (issue "One program, many runs"): seconds per iteration of each, their ratio, and the
check that both give the same numbers (float64, rtol 1e-10).  Used by benchmarks/run_all.py
(component ``programs``).

The programs (their structure and sizes; data made with NumPy from a fixed seed and given to both):

a. PyTorch tutorial ``two_layer_net_autograd``: manual weights, ``loss.backward()``,
   ``with torch.no_grad(): w -= lr * w.grad; w.grad.zero_()`` (N=64, D_in=1000, H=100, D_out=10);
b. pytorch/examples ``regression/main.py``: a degree-4 polynomial fit with ``nn.Linear``,
   ``F.smooth_l1_loss``, ``param.data.add_(-0.1 * param.grad)``; the batches its ``get_batch`` draws
   with ``torch.randn`` are drawn with NumPy beforehand (the same for both);
c. HIPS autograd ``examples/logistic_regression.py``: ``grad(training_loss)`` and
   ``weights -= training_gradient_fun(weights) * 0.01`` on its 4 x 3 toy dataset
   (daskgrad: ``dg.func.grad``);
d. HIPS autograd ``examples/neural_net.py``: the MLP (layer sizes 784-200-100-10, tanh,
   log-softmax, L2 prior) on synthetic MNIST-shaped data, trained with
   ``autograd.misc.optimizers.adam`` (daskgrad: the same Adam as a functional update loop
   ``x = x - step_size * mhat / (sqrt(vhat) + eps)`` over the list of (W, b) tuples);
   its ``print_perf`` callback (accuracy on the whole set each epoch) is left out of both;
e. HIPS autograd ``examples/rosenbrock.py``: ``value_and_grad(rosenbrock)``, here driving plain
   gradient descent from (0, 0) (the original hands it to SciPy's CG; daskgrad: ``dg.func.grad_and_value``).

daskgrad arrays are one chunk each (the programs are small), on the threaded scheduler.
"""
from __future__ import annotations

import statistics

import numpy as np

RTOL = 1e-10


def _rel_diff(a, b):
    """max |a - b| / max |b| over a dict of arrays (norm-wise relative difference)."""
    worst = 0.0
    for k in b:
        x, y = np.asarray(a[k], dtype=np.float64), np.asarray(b[k], dtype=np.float64)
        scale = max(float(np.max(np.abs(y))), 1e-300)
        worst = max(worst, float(np.max(np.abs(x - y))) / scale)
    return worst


# ------------------------------------------------------------------ a. two_layer_net_autograd
def two_layer_net(quick):
    import torch

    import daskgrad as dg

    N, D_in, H, D_out = 64, 1000, 100, 10
    learning_rate = 1e-6
    rng = np.random.default_rng(0)
    xn, yn = rng.standard_normal((N, D_in)), rng.standard_normal((N, D_out))
    w1n, w2n = rng.standard_normal((D_in, H)), rng.standard_normal((H, D_out))

    def torch_program():
        x, y = torch.from_numpy(xn), torch.from_numpy(yn)
        w1 = torch.from_numpy(w1n.copy()).requires_grad_()
        w2 = torch.from_numpy(w2n.copy()).requires_grad_()
        state = {"t": 0, "logged": []}

        def iteration():
            nonlocal w1, w2  # (module-level names in the tutorial)
            t = state["t"]
            y_pred = x.mm(w1).clamp(min=0).mm(w2)
            loss = (y_pred - y).pow(2).sum()
            if t % 100 == 99:
                state["logged"].append(loss.item())
            loss.backward()
            with torch.no_grad():
                w1 -= learning_rate * w1.grad
                w2 -= learning_rate * w2.grad
                w1.grad.zero_()
                w2.grad.zero_()
            state["t"] = t + 1
            state["loss"] = loss

        def result():
            return {"loss": state["loss"].item(), "w1": w1.detach().numpy(), "w2": w2.detach().numpy()}
        return iteration, result

    def daskgrad_program():
        x, y = dg.from_array(xn, chunks=-1), dg.from_array(yn, chunks=-1)
        w1 = dg.from_array(w1n.copy(), chunks=-1, requires_grad=True)
        w2 = dg.from_array(w2n.copy(), chunks=-1, requires_grad=True)
        state = {"t": 0, "logged": []}

        def iteration():
            nonlocal w1, w2  # (module-level names in the tutorial)
            t = state["t"]
            y_pred = x.mm(w1).clamp(min=0).mm(w2)
            loss = (y_pred - y).pow(2).sum()
            if t % 100 == 99:
                state["logged"].append(loss.item())
            loss.backward()
            with dg.no_grad():
                w1 -= learning_rate * w1.grad
                w2 -= learning_rate * w2.grad
                w1.grad.zero_()
                w2.grad.zero_()
            state["t"] = t + 1
            state["loss"] = loss

        def result():
            return {"loss": state["loss"].item(), "w1": w1.detach().numpy(), "w2": w2.detach().numpy()}
        return iteration, result

    return {"source": "PyTorch tutorial two_layer_net_autograd (polynomial/warm-up autograd), float64",
            "sizes": f"N={N}, D_in={D_in}, H={H}, D_out={D_out}", "original_framework": "torch",
            "original": torch_program, "daskgrad": daskgrad_program}


# ------------------------------------------------------------------ b. regression/main.py
POLY_DEGREE = 4


def _smooth_l1_loss_workaround(input, target):
    """torch's ``F.smooth_l1_loss`` (beta=1, mean) written with daskgrad ops: used only when
    ``daskgrad.nn.functional.smooth_l1_loss`` is missing (the result says so)."""
    import daskgrad as dg

    d = dg.abs(input - target)
    return dg.where(d < 1.0, 0.5 * d * d, d - 0.5).mean()


def regression(quick):
    import torch
    import torch.nn.functional as TF

    import daskgrad as dg
    import daskgrad.nn.functional as DF

    rng = np.random.default_rng(0)
    W_target_n, b_target_n = rng.standard_normal((POLY_DEGREE, 1)) * 5, rng.standard_normal(1) * 5
    fc_weight, fc_bias = rng.uniform(-0.5, 0.5, (1, POLY_DEGREE)), rng.uniform(-0.5, 0.5, 1)
    batches = [rng.standard_normal(32) for _ in range(64)]  # get_batch's torch.randn(batch_size), drawn here
    missing = []

    def torch_program():
        W_target, b_target = torch.from_numpy(W_target_n), torch.from_numpy(b_target_n)

        def make_features(x):
            x = x.unsqueeze(1)
            return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)

        def f(x):
            return x.mm(W_target) + b_target.item()

        def get_batch(batch_idx):
            random = torch.from_numpy(batches[batch_idx % len(batches)])
            x = make_features(random)
            y = f(x)
            return x, y

        fc = torch.nn.Linear(W_target.size(0), 1, dtype=torch.float64)
        fc.load_state_dict({"weight": torch.from_numpy(fc_weight), "bias": torch.from_numpy(fc_bias)})
        state = {"batch_idx": 0}

        def iteration():
            batch_x, batch_y = get_batch(state["batch_idx"])
            fc.zero_grad()
            output = TF.smooth_l1_loss(fc(batch_x), batch_y)
            state["loss"] = output.item()
            output.backward()
            for param in fc.parameters():
                param.data.add_(-0.1 * param.grad)
            state["batch_idx"] += 1

        def result():
            return {"loss": state["loss"], "weight": fc.weight.detach().numpy(), "bias": fc.bias.detach().numpy()}
        return iteration, result

    def daskgrad_program():
        W_target, b_target = dg.from_array(W_target_n, chunks=-1), dg.from_array(b_target_n, chunks=-1)
        smooth_l1_loss = getattr(DF, "smooth_l1_loss", None)
        if smooth_l1_loss is None:
            try:
                DF.smooth_l1_loss  # noqa: B018  (the original's spelling: record the error it raises)
            except AttributeError as e:
                missing.append(f"daskgrad.nn.functional.smooth_l1_loss: AttributeError: {e}; timed with a "
                               "user-written smooth_l1_loss (dg.where(|d| < 1, 0.5 d^2, |d| - 0.5).mean())")
            smooth_l1_loss = _smooth_l1_loss_workaround

        def make_features(x):
            x = x.unsqueeze(1)
            return dg.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)

        def f(x):
            return x.mm(W_target) + b_target.item()

        def get_batch(batch_idx):
            random = dg.from_array(batches[batch_idx % len(batches)], chunks=-1)
            x = make_features(random)
            y = f(x)
            return x, y

        fc = dg.nn.Linear(W_target.size(0), 1, dtype="float64")
        fc.load_state_dict({"weight": fc_weight, "bias": fc_bias})
        state = {"batch_idx": 0}

        def iteration():
            batch_x, batch_y = get_batch(state["batch_idx"])
            fc.zero_grad()
            output = smooth_l1_loss(fc(batch_x), batch_y)
            state["loss"] = output.item()
            output.backward()
            for param in fc.parameters():
                param.data.add_(-0.1 * param.grad)
            state["batch_idx"] += 1

        def result():
            return {"loss": state["loss"], "weight": fc.weight.detach().numpy(), "bias": fc.bias.detach().numpy()}
        return iteration, result

    return {"source": "pytorch/examples regression/main.py (nn.Linear, F.smooth_l1_loss, param.data.add_), float64",
            "sizes": f"degree {POLY_DEGREE}, batches of 32", "original_framework": "torch",
            "original": torch_program, "daskgrad": daskgrad_program, "missing": missing}


# ------------------------------------------------------------------ c. HIPS logistic_regression.py
def logistic_regression(quick):
    import autograd.numpy as anp
    from autograd import grad

    import daskgrad as dg

    inputs_n = np.array([[0.52, 1.12, 0.77], [0.88, -1.08, 0.15], [0.52, 0.06, -1.30], [0.74, -2.49, 1.39]])
    targets_n = np.array([True, True, False, True])

    def autograd_program():
        inputs, targets = inputs_n, targets_n

        def sigmoid(x):
            return 0.5 * (anp.tanh(x) + 1)

        def logistic_predictions(weights, inputs):
            return sigmoid(anp.dot(inputs, weights))

        def training_loss(weights):
            preds = logistic_predictions(weights, inputs)
            label_probabilities = preds * targets + (1 - preds) * (1 - targets)
            return -anp.sum(anp.log(label_probabilities))

        training_gradient_fun = grad(training_loss)
        state = {"weights": np.array([0.0, 0.0, 0.0])}

        def iteration():
            weights = state["weights"]
            weights -= training_gradient_fun(weights) * 0.01

        def result():
            return {"loss": training_loss(state["weights"]), "weights": state["weights"]}
        return iteration, result

    def daskgrad_program():
        # (as floats: torch, whose Tensor semantics daskgrad has, refuses `1 - targets` of a bool tensor)
        inputs, targets = dg.from_array(inputs_n, chunks=-1), dg.from_array(targets_n * 1.0, chunks=-1)

        def sigmoid(x):
            return 0.5 * (dg.tanh(x) + 1)

        def logistic_predictions(weights, inputs):
            return sigmoid(dg.dot(inputs, weights))

        def training_loss(weights):
            preds = logistic_predictions(weights, inputs)
            label_probabilities = preds * targets + (1 - preds) * (1 - targets)
            return -dg.sum(dg.log(label_probabilities))

        training_gradient_fun = dg.func.grad(training_loss)
        state = {"weights": dg.tensor(np.array([0.0, 0.0, 0.0]))}

        def iteration():
            weights = state["weights"]
            weights -= training_gradient_fun(weights) * 0.01

        def result():
            return {"loss": training_loss(state["weights"]).item(), "weights": state["weights"].numpy()}
        return iteration, result

    return {"source": "HIPS autograd examples/logistic_regression.py (grad + gradient descent), float64",
            "sizes": "its 4 x 3 toy dataset", "original_framework": "autograd",
            "original": autograd_program, "daskgrad": daskgrad_program}


# ------------------------------------------------------------------ d. HIPS neural_net.py with adam
def neural_net(quick):
    import autograd.numpy as anp
    import numpy.random as npr
    from autograd import grad
    from autograd.misc.flatten import flatten
    from autograd.misc.optimizers import adam
    from autograd.scipy.special import logsumexp

    import daskgrad as dg

    layer_sizes = [784, 200, 100, 10]
    L2_reg, param_scale, batch_size, step_size = 1.0, 0.1, 256, 0.001
    num_batches, num_epochs = (2, 1) if quick else (4, 2)
    rng = np.random.default_rng(0)  # synthetic MNIST-shaped data: images in [0, 1), one-hot labels
    train_images = rng.random((num_batches * batch_size, layer_sizes[0]))
    train_labels = np.eye(layer_sizes[-1])[rng.integers(0, layer_sizes[-1], num_batches * batch_size)]

    def init_random_params(scale, layer_sizes, rs=None):
        rs = npr.RandomState(0) if rs is None else rs
        return [(scale * rs.randn(m, n), scale * rs.randn(n)) for m, n in zip(layer_sizes[:-1], layer_sizes[1:])]

    def batch_indices(iter):
        idx = iter % num_batches
        return slice(idx * batch_size, (idx + 1) * batch_size)

    def autograd_program():
        def neural_net_predict(params, inputs):
            for W, b in params:
                outputs = anp.dot(inputs, W) + b
                inputs = anp.tanh(outputs)
            return outputs - logsumexp(outputs, axis=1, keepdims=True)

        def l2_norm(params):
            flattened, _ = flatten(params)
            return anp.dot(flattened, flattened)

        def log_posterior(params, inputs, targets, L2_reg):
            log_prior = -L2_reg * l2_norm(params)
            log_lik = anp.sum(neural_net_predict(params, inputs) * targets)
            return log_prior + log_lik

        def objective(params, iter):
            idx = batch_indices(iter)
            return -log_posterior(params, train_images[idx], train_labels[idx], L2_reg)

        objective_grad = grad(objective)
        state = {}

        def run():
            init_params = init_random_params(param_scale, layer_sizes)
            state["params"] = adam(objective_grad, init_params, step_size=step_size,
                                   num_iters=num_epochs * num_batches)

        def result():
            params = state["params"]
            return {"objective": objective(params, 0), **{f"W{i}": W for i, (W, _) in enumerate(params)},
                    **{f"b{i}": b for i, (_, b) in enumerate(params)}}
        return run, result

    def daskgrad_program():
        images, labels = dg.from_array(train_images, chunks=-1), dg.from_array(train_labels, chunks=-1)

        def neural_net_predict(params, inputs):
            for W, b in params:
                outputs = dg.dot(inputs, W) + b
                inputs = dg.tanh(outputs)
            return outputs - dg.logsumexp(outputs, axis=1, keepdims=True)

        def l2_norm(params):
            flattened = dg.cat([t.reshape(-1) for layer in params for t in layer])
            return dg.dot(flattened, flattened)

        def log_posterior(params, inputs, targets, L2_reg):
            log_prior = -L2_reg * l2_norm(params)
            log_lik = dg.sum(neural_net_predict(params, inputs) * targets)
            return log_prior + log_lik

        def objective(params, iter):
            idx = batch_indices(iter)
            return -log_posterior(params, images[idx], labels[idx], L2_reg)

        objective_grad = dg.func.grad(objective)

        def tree(f, *trees):  # the list of (W, b) tuples, leaf by leaf
            return [tuple(f(*leaves) for leaves in zip(*layers)) for layers in zip(*trees)]

        def adam_dg(grad, x, callback=None, num_iters=100, step_size=0.001, b1=0.9, b2=0.999, eps=10**-8):
            """autograd.misc.optimizers.adam, leaf by leaf (its flatten/unflatten is elementwise-equal)."""
            m = tree(dg.zeros_like, x)
            v = tree(dg.zeros_like, x)
            for i in range(num_iters):
                g = grad(x, i)
                if callback:
                    callback(x, i, g)
                m = tree(lambda g, m: (1 - b1) * g + b1 * m, g, m)
                v = tree(lambda g, v: (1 - b2) * (g ** 2) + b2 * v, g, v)
                mhat = tree(lambda m: m / (1 - b1 ** (i + 1)), m)
                vhat = tree(lambda v: v / (1 - b2 ** (i + 1)), v)
                x = tree(lambda x, mh, vh: x - step_size * mh / (dg.sqrt(vh) + eps), x, mhat, vhat)
            return x

        state = {}

        def run():
            init_params = [(dg.from_array(W, chunks=-1), dg.from_array(b, chunks=-1))
                           for W, b in init_random_params(param_scale, layer_sizes)]
            params = adam_dg(objective_grad, init_params, step_size=step_size, num_iters=num_epochs * num_batches)
            state["params"] = [(W.numpy(), b.numpy()) for W, b in params]  # the loop's result, computed

        def result():
            params = state["params"]
            wrapped = [(dg.from_array(W, chunks=-1), dg.from_array(b, chunks=-1)) for W, b in params]
            return {"objective": objective(wrapped, 0).item(), **{f"W{i}": W for i, (W, _) in enumerate(params)},
                    **{f"b{i}": b for i, (_, b) in enumerate(params)}}
        return run, result

    return {"source": "HIPS autograd examples/neural_net.py trained with autograd.misc.optimizers.adam "
                      "(daskgrad: the same Adam as a functional update loop), synthetic data, float64",
            "sizes": f"layers {layer_sizes}, batch {batch_size}, {num_batches} batches x {num_epochs} epochs "
                     "per call (one adam run from the initial parameters)",
            "original_framework": "autograd", "iterations_per_call": num_epochs * num_batches,
            "original": autograd_program, "daskgrad": daskgrad_program}


# ------------------------------------------------------------------ e. HIPS rosenbrock.py
def rosenbrock(quick):
    import autograd.numpy as anp
    from autograd import value_and_grad

    import daskgrad as dg

    lr = 1e-3

    def rosenbrock_fn(x):
        return 100 * (x[1] - x[0] ** 2) ** 2 + (1 - x[0]) ** 2

    def autograd_program():
        rosenbrock_with_grad = value_and_grad(rosenbrock_fn)
        state = {"x": anp.array([0.0, 0.0])}

        def iteration():
            state["value"], g = rosenbrock_with_grad(state["x"])
            state["x"] = state["x"] - lr * g

        def result():
            return {"value": state["value"], "x": state["x"]}
        return iteration, result

    def daskgrad_program():
        rosenbrock_with_grad = dg.func.grad_and_value(rosenbrock_fn)  # torch.func's order: (grad, value)
        state = {"x": dg.tensor(np.array([0.0, 0.0]))}

        def iteration():
            g, state["value"] = rosenbrock_with_grad(state["x"])
            state["x"] = state["x"] - lr * g

        def result():
            return {"value": state["value"].item(), "x": state["x"].numpy()}
        return iteration, result

    return {"source": "HIPS autograd examples/rosenbrock.py: value_and_grad(rosenbrock), driving gradient descent "
                      "(lr 1e-3) from (0, 0) in place of SciPy's CG", "sizes": "x of 2 elements",
            "original_framework": "autograd", "original": autograd_program, "daskgrad": daskgrad_program}


PROGRAMS = {"a_two_layer_net_autograd": two_layer_net, "b_regression": regression,
            "c_logistic_regression": logistic_regression, "d_neural_net_adam": neural_net,
            "e_rosenbrock": rosenbrock}


def run(quick=False, rounds=None, warmup=3, interleaved=None):
    """Every program: seconds per iteration (median over interleaved rounds) for the original and the
    daskgrad port, their ratio, and the largest relative difference of their results (asserted <= 1e-10)."""
    import dask

    if interleaved is None:
        from run_all import interleaved
    rounds = rounds or (3 if quick else 25)
    out = {"problem": "small public example programs, each in its original framework and in daskgrad "
                      "(one-chunk arrays, threaded scheduler, float64): seconds per iteration, median of "
                      "interleaved rounds", "rtol": RTOL, "rows": {}}
    with dask.config.set(scheduler="threads"):
        for name, make in PROGRAMS.items():
            p = make(quick)
            orig_step, orig_result = p["original"]()
            dg_step, dg_result = p["daskgrad"]()
            per_call = p.get("iterations_per_call", 1)
            for _ in range(warmup if per_call == 1 else 0):  # a loop's steady state (the step cache keeps a
                orig_step()                                    # step at its third submission)
                dg_step()
            seconds = interleaved({"original": orig_step, "daskgrad": dg_step}, rounds)
            a, b = dg_result(), orig_result()
            diff = _rel_diff(a, b)
            assert diff <= RTOL, f"{name}: daskgrad and {p['original_framework']} differ by {diff:.3g} (relative)"
            row = {"source": p["source"], "sizes": p["sizes"], "original_framework": p["original_framework"],
                   "iterations_per_call": per_call,
                   "seconds_per_iteration": {"original": seconds["original"] / per_call,
                                             "daskgrad": seconds["daskgrad"] / per_call},
                   "daskgrad_over_original": seconds["daskgrad"] / seconds["original"],
                   "max_relative_difference": diff, "agree": True,
                   "final": {k: float(np.asarray(v).ravel()[0]) for k, v in b.items() if np.ndim(v) == 0}}
            if p.get("missing"):
                row["missing_in_daskgrad"] = p["missing"]
            out["rows"][name] = row
    ratios = [r["daskgrad_over_original"] for r in out["rows"].values()]
    out["median_daskgrad_over_original"] = statistics.median(ratios)
    out["missing_in_daskgrad"] = [m for r in out["rows"].values() for m in r.get("missing_in_daskgrad", ())]
    return out


# ------------------------------------------------------------------ the plain loop on tiny chunks
def plain_loop(quick, interleaved, nchunks=200, rows=10, d=10, lr=0.1):
    """The ``overhead`` component's step (logistic regression, chunks of ``rows`` x ``d`` float64,
    threaded scheduler) written as the plain loop -- ``loss.backward(); w -= lr * w.grad`` -- at
    ``nchunks`` chunks, no ``dg.compile``: ms per chunk; and the same step in PyTorch on the whole
    data, for reference.  Both variants run the same number of steps; their ``w`` must agree."""
    import dask
    import torch

    import daskgrad as dg

    block, rounds = (2, 3) if quick else (5, 7)
    rng = np.random.default_rng(0)
    Xn, yn = rng.standard_normal((nchunks * rows, d)), (rng.random(nchunks * rows) > 0.5) * 1.0
    X, y = dg.from_array(Xn, chunks=(rows, d)), dg.from_array(yn, chunks=rows)
    w = dg.zeros(d, dtype="float64", requires_grad=True)
    Xt, yt = torch.from_numpy(Xn), torch.from_numpy(yn)
    wt = torch.zeros(d, dtype=torch.float64, requires_grad=True)

    def daskgrad_step():
        nonlocal w
        dg.binary_cross_entropy_with_logits(X @ w, y).backward()
        with dg.no_grad():
            w -= lr * w.grad
        w.grad = None

    def torch_step():
        torch.nn.functional.binary_cross_entropy_with_logits(Xt @ wt, yt).backward()
        with torch.no_grad():
            wt.sub_(lr * wt.grad)
        wt.grad = None

    def steps(fn):  # a few steps in a row, as a loop runs them (as the overhead component times)
        return lambda: [fn() for _ in range(block)]

    with dask.config.set(scheduler="threads"):
        for _ in range(3):  # a loop's steady state: its template is made at the second submission, instantiated after
            daskgrad_step()
            torch_step()
        seconds = interleaved({"daskgrad_plain_loop": steps(daskgrad_step), "pytorch_whole_data": steps(torch_step)},
                              rounds)
        diff = _rel_diff({"w": w.detach().numpy()}, {"w": wt.detach().numpy()})
    assert diff <= RTOL, f"plain loop: daskgrad's w and torch's differ by {diff:.3g} (relative)"
    per_step = {k: v / block for k, v in seconds.items()}
    return {"problem": f"logistic-regression plain-loop step (backward; w -= lr * w.grad; no compile), "
                       f"{nchunks} chunks of {rows}x{d} float64, threaded scheduler; PyTorch: the same step on the "
                       f"whole {nchunks * rows}x{d} array", "chunks": nchunks,
            "seconds_per_step": per_step,
            f"ms_per_chunk_plain_loop_{nchunks}_tiny_chunks_no_compile":
                1e3 * per_step["daskgrad_plain_loop"] / nchunks,
            "pytorch_ms_per_step_whole_data": 1e3 * per_step["pytorch_whole_data"],
            "daskgrad_over_pytorch": per_step["daskgrad_plain_loop"] / per_step["pytorch_whole_data"],
            "max_relative_difference_of_w": diff}


# ------------------------------------------------------------------ checkpoint_steps as one block
def _timed(fn):
    import time

    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _readme_wave(dg, steps, snapshots, checkpoint_steps, counter):
    """The README's checkpoint_steps example (a 1-D wave equation, state (u_prev, u), wave speed ``c``
    requiring grad), with the definitions of docs/user-guide/checkpointing.md (200 points in 4 chunks)."""
    n = 200
    c = dg.full(n, 0.5, dtype="float64", chunks=50, requires_grad=True)
    lap = np.array([1.0, -2.0, 1.0])
    u0 = dg.from_array(np.exp(-0.01 * (np.arange(n) - n / 2) ** 2), chunks=50)
    u1 = u0 * 1.0

    def misfit(u):
        return (u ** 2).sum()

    def step(state, i):
        counter[0] += 1
        u_prev, u = state
        return u, 2 * u - u_prev + c ** 2 * dg.correlate(u, lap, mode="constant")

    u_prev, u = checkpoint_steps(step, (u0, u1), steps, snapshots=snapshots)
    misfit(u).backward()
    return c.grad.numpy()


def _torch_wave(steps):
    import torch

    n = 200
    c = torch.full((n,), 0.5, dtype=torch.float64, requires_grad=True)
    u0 = torch.from_numpy(np.exp(-0.01 * (np.arange(n) - n / 2) ** 2))
    u_prev, u = u0, u0 * 1.0
    for _ in range(steps):
        p = torch.nn.functional.pad(u, (1, 1))
        u_prev, u = u, 2 * u - u_prev + c ** 2 * (p[:-2] - 2 * p[1:-1] + p[2:])
    (u ** 2).sum().backward()
    return c.grad.numpy()


def _diffusion_2d(dg, steps, snapshots, checkpoint_steps, counter):
    """The issue's stand-in: a 32x32 float64 state in 4 chunks, 5-point diffusion with a coefficient
    ``c`` requiring grad (periodic, via roll)."""
    c = dg.tensor(1.0, dtype="float64", requires_grad=True)
    u0 = dg.from_array(np.random.default_rng(0).standard_normal((32, 32)), chunks=16)

    def step(u, i):
        counter[0] += 1
        return u + 0.01 * (dg.roll(u, 1, 0) + dg.roll(u, -1, 0) + dg.roll(u, 1, 1) + dg.roll(u, -1, 1) - 4 * u) * c

    u = checkpoint_steps(step, u0, steps, snapshots=snapshots)
    (u ** 2).sum().backward()
    return np.asarray(c.grad.numpy())


def _torch_diffusion_2d(steps):
    import torch

    c = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    u = torch.from_numpy(np.random.default_rng(0).standard_normal((32, 32)))
    for _ in range(steps):
        u = u + 0.01 * (torch.roll(u, 1, 0) + torch.roll(u, -1, 0) + torch.roll(u, 1, 1) + torch.roll(u, -1, 1)
                        - 4 * u) * c
    (u ** 2).sum().backward()
    return c.grad.numpy()


def checkpoint_block(quick, interleaved):
    """The whole ``checkpoint_steps`` block -- forward, ``backward()``, reading ``c.grad`` -- in seconds,
    the calls of ``step`` it made (a counting wrapper), and the same program as a plain loop in PyTorch
    (no checkpointing) for reference; the gradients must agree (rtol 1e-10)."""
    import dask

    import daskgrad as dg
    from daskgrad.utils import revolve
    from daskgrad.utils.checkpoint import checkpoint_steps

    steps, snapshots = (20, 3) if quick else (1000, 20)
    # rounds of interleaved timing (after a warm-up run); 0: one run each, timed (the 2-D block takes 30-70 s
    # at 1,000 steps on the shared 2-core machine)
    programs = {"readme_1d_wave": (_readme_wave, _torch_wave, 1 if quick else 3),
                "issue_2d_diffusion_32x32": (_diffusion_2d, _torch_diffusion_2d, 1 if quick else 0)}
    out = {"problem": f"checkpoint_steps(step, state, {steps}, snapshots={snapshots}); (u ** 2).sum().backward(); "
                      "c.grad, threaded scheduler; PyTorch: the same steps as a plain loop", "steps": steps,
           "snapshots": snapshots, "revolve_t": revolve.repetitions(steps, snapshots), "rows": {}}
    with dask.config.set(scheduler="threads"):
        for name, (program, reference, rounds) in programs.items():
            calls, grads = [], {}
            counter = [0]

            def block():
                counter[0] = 0
                grads["daskgrad"] = program(dg, steps, snapshots, checkpoint_steps, counter)
                calls.append(counter[0])

            def torch_block():
                grads["pytorch"] = reference(steps)

            fns = {"daskgrad_checkpoint_steps": block, "pytorch_plain_loop": torch_block}
            seconds = interleaved(fns, rounds) if rounds else {k: _timed(fn) for k, fn in fns.items()}
            diff = _rel_diff({"c_grad": grads["daskgrad"]}, {"c_grad": grads["pytorch"]})
            assert diff <= RTOL, f"{name}: c.grad differs from torch's by {diff:.3g} (relative)"
            assert len(set(calls)) == 1, calls
            out["rows"][name] = {"seconds": seconds, "timed_runs": max(rounds, 1),
                                 "daskgrad_over_pytorch": seconds["daskgrad_checkpoint_steps"]
                                 / seconds["pytorch_plain_loop"],
                                 "step_calls": calls[0], "max_relative_difference_of_c_grad": diff,
                                 "c_grad_norm": float(np.linalg.norm(grads["daskgrad"]))}
    out["rows"]["readme_1d_wave"]["program"] = ("README (commit 0bc8142) section 'Checkpointed time stepping': "
                                                "1-D wave, state (u_prev, u), 200 points in 4 chunks of 50, "
                                                "c = full(200, 0.5) requiring grad")
    out["rows"]["issue_2d_diffusion_32x32"]["program"] = ("32x32 float64 in 4 chunks, u + 0.01 * (4 rolls - 4u) * c, "
                                                          "c a 0-d leaf requiring grad")
    return out


# ------------------------------------------------------------------ make demo's training step
def _demo_models(features, classes, lr):
    """examples/demo.py's model, loss and Adam, and the same in PyTorch from the same initial parameters:
    ``(daskgrad's, PyTorch's)``, each ``(model, criterion, optimizer)``."""
    import torch

    import daskgrad as dg
    from daskgrad import nn, optim

    import demo

    dg.manual_seed(1)
    model = demo.model_for(features, classes)
    tmodel = torch.nn.Sequential(torch.nn.Linear(features, 64), torch.nn.ReLU(), torch.nn.Linear(64, classes))
    tmodel.load_state_dict({k: torch.from_numpy(np.array(v.detach().numpy())) for k, v in model.state_dict().items()})
    return ((model, nn.CrossEntropyLoss(), optim.Adam(model.parameters(), lr=lr)),
            (tmodel, torch.nn.CrossEntropyLoss(), torch.optim.Adam(tmodel.parameters(), lr=lr)))


def _train_step(model, criterion, optimizer, xb, yb):
    """demo.py's loop body, the same code in daskgrad and in PyTorch: the loss."""
    loss = criterion(model(xb), yb)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def demo_step(quick, interleaved):
    """Seconds per training step of ``make demo``'s job (examples/demo.py: its data, model, loss,
    Adam and loop body, on its embedded LocalCluster of 2 worker processes x 1 thread; in-process
    workers in quick mode) and the same step in PyTorch on the same minibatches, from the same
    initial parameters: the losses must agree to float32 precision."""
    import os
    import sys
    import time

    import torch

    import daskgrad as dg

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import demo

    if quick:
        rows, chunk_rows, batch_chunks, test_chunks, rounds = 12_000, 1_000, 4, 4, 2
    else:  # demo.py's defaults
        rows, chunk_rows, batch_chunks, test_chunks, rounds = 400_000, 20_000, 4, 4, 7
    features, classes, lr = 20, 3, 0.01
    client = dg.connect("local", n_workers=2, threads_per_worker=1, processes=not quick, dashboard_address=None)
    try:
        X, y = demo.make_data(rows, features, classes, chunk_rows)
        ours, theirs = _demo_models(features, classes, lr)
        batch = chunk_rows * batch_chunks
        steps = (rows - chunk_rows * test_chunks) // batch
        Xn, yn = X.numpy(), y.numpy()
        losses = {"daskgrad": [], "pytorch": []}

        def daskgrad_step():
            i = len(losses["daskgrad"]) % steps
            rows_i = slice(i * batch, (i + 1) * batch)
            losses["daskgrad"].append(_train_step(*ours, X[rows_i], y[rows_i]))

        def torch_step():
            i = len(losses["pytorch"]) % steps
            rows_i = slice(i * batch, (i + 1) * batch)
            losses["pytorch"].append(_train_step(*theirs, torch.from_numpy(Xn[rows_i]), torch.from_numpy(yn[rows_i])))

        # the loop's steady state: its first steps are lowered (the first sees the dataset made, the next ones
        # Adam's state made), every later one is an instance of one template; the first two epochs are timed apart
        t0 = time.perf_counter()
        for _ in range(2 * steps):
            daskgrad_step()
        first_epochs = (time.perf_counter() - t0) / (2 * steps)
        for _ in range(2 * steps):
            torch_step()
        seconds = interleaved({"daskgrad_demo_step": daskgrad_step, "pytorch_step": torch_step}, rounds)
        a, b = np.array(losses["daskgrad"]), np.array(losses["pytorch"])
        diff = float(np.max(np.abs(a - b) / np.abs(b)))
        assert diff <= 1e-4, f"demo step: daskgrad's losses and torch's differ by {diff:.3g} (relative): {a} {b}"
        workers = len(client.scheduler_info()["workers"])
    finally:
        cluster = client.cluster
        client.close()
        cluster.close()
    return {"problem": f"examples/demo.py's training step (MLP {features}->64->{classes}, cross-entropy, "
                       f"Adam lr {lr}), "
                       f"minibatches of {batch:,} rows ({batch_chunks} chunks of {chunk_rows:,}) of {rows:,} x "
                       f"{features} float32; LocalCluster of {workers} workers x 1 thread "
                       f"({'in-process' if quick else 'processes'}); PyTorch: the same step on the same data",
            "seconds_per_step": seconds,
            "daskgrad_over_pytorch": seconds["daskgrad_demo_step"] / seconds["pytorch_step"],
            "daskgrad_seconds_per_step_first_two_epochs": first_epochs,
            "steps_run": len(a), "max_relative_loss_difference": diff, "last_loss": float(a[-1])}


def minibatch_loop(quick, interleaved):
    """Seconds per training step of examples/demo.py's model, loss and Adam over many small minibatches
    ``X[i * b:(i + 1) * b]`` of a dataset held in memory (made by the first epoch), several to a chunk,
    on dask's threaded scheduler, as a notebook runs it, and of the same loop in PyTorch on the same
    minibatches; whole epochs are interleaved.  ``programs_lowered_after_first_epoch`` counts the
    programs lowered (cache misses) after the first epoch: each minibatch's offsets were part of its
    step's program, so more minibatches than the cache holds were lowered at every step."""
    import os
    import sys
    import time

    import dask
    import torch

    import daskgrad as dg

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import demo

    if quick:
        batches, batch, chunk_rows, rounds = 24, 100, 400, 2
    else:
        batches, batch, chunk_rows, rounds = 96, 500, 2_000, 5
    features, classes, lr = 20, 3, 0.01
    with dask.config.set(scheduler="threads"):
        X, y = demo.make_data(batches * batch, features, classes, chunk_rows)
        ours, theirs = _demo_models(features, classes, lr)
        losses = {"daskgrad": [], "pytorch": []}
        Xn = yn = None

        def daskgrad_epoch():
            for i in range(batches):
                rows = slice(i * batch, (i + 1) * batch)
                losses["daskgrad"].append(_train_step(*ours, X[rows], y[rows]))

        def torch_epoch():
            for i in range(batches):
                rows = slice(i * batch, (i + 1) * batch)
                losses["pytorch"].append(_train_step(*theirs, torch.from_numpy(Xn[rows]), torch.from_numpy(yn[rows])))

        t0 = time.perf_counter()
        daskgrad_epoch()  # (it makes the dataset: timed apart)
        first_epoch = (time.perf_counter() - t0) / batches
        Xn, yn = X.numpy(), y.numpy()
        torch_epoch()
        misses = dg.step_cache_info()["misses"]
        seconds = interleaved({"daskgrad_epoch": daskgrad_epoch, "pytorch_epoch": torch_epoch}, rounds)
        misses = dg.step_cache_info()["misses"] - misses
    # (the first two epochs: float32 Adam over hundreds of steps amplifies the last bits' differences of
    # two summation orders, to 0.5% by the seventh epoch; the same loop in float64 agrees to 5e-16 in all seven)
    a, b = np.array(losses["daskgrad"][:2 * batches]), np.array(losses["pytorch"][:2 * batches])
    diff = float(np.max(np.abs(a - b) / np.abs(b)))
    assert diff <= 1e-4, f"minibatch loop: daskgrad's losses and torch's differ by {diff:.3g} (relative)"
    per_step = {"daskgrad": seconds["daskgrad_epoch"] / batches, "pytorch": seconds["pytorch_epoch"] / batches}
    return {"problem": f"examples/demo.py's model, loss and Adam over {batches} minibatches of {batch} rows in "
                       f"chunks of {chunk_rows} rows ({batches * batch:,} x {features} float32, made by the first "
                       "epoch and held), dask's threaded scheduler; PyTorch: the same loop on the same minibatches",
            "seconds_per_step": per_step, "daskgrad_over_pytorch": per_step["daskgrad"] / per_step["pytorch"],
            "daskgrad_seconds_per_step_first_epoch": first_epoch,
            "programs_lowered_after_first_epoch": misses, "steps_run": len(losses["daskgrad"]),
            "max_relative_loss_difference_first_two_epochs": diff}


# ------------------------------------------------------------------ the package's size
def package_lines(root):
    """Non-blank lines of daskgrad/**/*.py (stubs, .pyi, excluded)."""
    import os

    total, files = 0, 0
    for dirpath, _, names in os.walk(os.path.join(root, "daskgrad")):
        for name in names:
            if name.endswith(".py"):
                files += 1
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    total += sum(1 for line in f if line.strip())
    return {"non_blank_lines": total, "files": files, "what": "non-blank lines of daskgrad/**/*.py (not .pyi)"}

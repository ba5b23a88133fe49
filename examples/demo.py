"""daskgrad demo: fit a 2-layer MLP classifier on a chunked synthetic dataset.

Runs on an embedded LocalCluster (dashboard at http://127.0.0.1:8787/status while it runs).
Each step is one forward + one backward submission; the graph is released after each step.
"""
import time

import numpy as np

import daskgrad as dg


def make_data(n=200_000, d=20, chunks=20_000, seed=0):
    """Made on the workers (nothing shipped from the client): 3 classes from a noisy linear rule."""
    dg.manual_seed(seed)
    w_true = dg.tensor(np.random.default_rng(seed).standard_normal((d, 3)).astype(np.float32))
    X = dg.randn(n, d, chunks=(chunks, d)).persist()
    y = dg.argmax(X @ w_true + 0.5 * dg.randn(n, 3, chunks=(chunks, 3)), axis=1).persist()
    return X, y


def main(steps=30, lr=0.5):
    # worker processes: each gets single-threaded BLAS (the nanny sets OMP_NUM_THREADS=1), no oversubscription
    client = dg.connect("local", n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:8787")
    print(f"daskgrad {dg.__version__} on {client.dashboard_link}")
    X, y = make_data()
    dg.manual_seed(0)
    w1 = (dg.randn(20, 64) * 0.2).detach().persist().requires_grad_()
    b1 = dg.zeros(64, requires_grad=True)
    w2 = (dg.randn(64, 3) * 0.2).detach().persist().requires_grad_()
    b2 = dg.zeros(3, requires_grad=True)
    params = [w1, b1, w2, b2]
    t0 = time.perf_counter()
    for step in range(steps):
        hidden = dg.relu(X @ w1 + b1)
        loss = dg.cross_entropy(hidden @ w2 + b2, y)
        loss.backward()                      # one submission computes every gradient
        with dg.no_grad():
            for p in params:
                p -= lr * p.grad
                p.grad = None
            for p in params:
                p.persist()
        if step % 5 == 0 or step == steps - 1:
            with dg.no_grad():
                acc = float(dg.mean(dg.argmax(hidden @ w2 + b2, axis=1) == y))
            print(f"step {step:3d}  loss {loss.detach().item():.4f}  accuracy {acc:.3f}")
    print(f"{steps} steps in {time.perf_counter() - t0:.1f} s; keys in cluster memory now: "
          f"{client.run_on_scheduler(lambda dask_scheduler: sum(ts.state == 'memory' for ts in dask_scheduler.tasks.values()))}")
    client.close()


if __name__ == "__main__":
    main()

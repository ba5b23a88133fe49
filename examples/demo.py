"""daskgrad demo: train a 2-layer MLP classifier on a chunked dataset on a Dask cluster.

    python examples/demo.py                          # an embedded LocalCluster (make demo)
    python examples/demo.py --address tcp://host:8786 --rows 2_000_000
    python examples/demo.py --scheduler-file scheduler.json

The loop is the one PyTorch users write (``nn``, ``optim``, ``loss.backward()``,
``optimizer.step()``); each step is one Dask submission that computes the gradients,
the loss and the previous step's parameter update.  Open the dashboard while it runs:
the daskgrad page shows the running backward, time per VJP rule and what stays in memory.
"""
import argparse
import time

import numpy as np

import daskgrad as dg
from daskgrad import nn, optim


def make_data(rows, features, classes, chunk_rows, seed=0):
    """A synthetic dataset made chunk by chunk on the workers (nothing shipped from here):
    labels come from a hidden random 2-layer network plus noise."""
    dg.manual_seed(seed)
    rng = np.random.default_rng(seed)
    W1 = dg.tensor(rng.standard_normal((features, 32)).astype(np.float32))
    W2 = dg.tensor(rng.standard_normal((32, classes)).astype(np.float32))
    X = dg.randn(rows, features, chunks=(chunk_rows, features))
    noise = dg.randn(rows, classes, chunks=(chunk_rows, classes))
    y = dg.argmax(dg.tanh(X @ W1) @ W2 + noise, axis=1)
    return X, y


def model_for(features, classes, dtype="float32"):
    return nn.Sequential(nn.Linear(features, 64, dtype=dtype), nn.ReLU(), nn.Linear(64, classes, dtype=dtype))


def check_gradients(model, X, y, rows=6):
    """Finite differences against backward, in float64, on a small slice of the data."""
    features, classes = X.shape[1], model[2].out_features
    model64 = model_for(features, classes, dtype="float64")
    model64.load_state_dict({k: v.detach().astype("float64") for k, v in model.state_dict().items()})
    Xs = X[:rows].astype("float64").detach().requires_grad_()
    ys = y[:rows]
    criterion = nn.CrossEntropyLoss()
    return dg.testing.gradcheck(lambda inp: criterion(model64(inp), ys), [Xs])


def plot(step_losses, steps_per_epoch, classes, path=None):
    """The training loss at every step, each epoch's mean, and the loss of a guess (uniform over the
    classes: ``log(classes)``) for reference; written to ``path`` if given.  Returns the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    steps = np.arange(1, len(step_losses) + 1)
    ax.plot(steps, step_losses, marker=".", lw=1, label="minibatch loss")
    epochs = len(step_losses) // steps_per_epoch
    means = [np.mean(step_losses[e * steps_per_epoch:(e + 1) * steps_per_epoch]) for e in range(epochs)]
    ax.plot((np.arange(epochs) + 1) * steps_per_epoch, means, marker="o", ls="--", label="epoch mean")
    ax.axhline(np.log(classes), color="grey", ls=":", label=f"uniform guess, log {classes}")
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy loss")
    ax.set_title("daskgrad MLP on a chunked dataset")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", help="an existing scheduler, e.g. tcp://host:8786")
    p.add_argument("--scheduler-file", help="a scheduler file, e.g. from cluster/slurm")
    p.add_argument("--rows", type=int, default=400_000)
    p.add_argument("--features", type=int, default=20)
    p.add_argument("--classes", type=int, default=3)
    p.add_argument("--chunk-rows", type=int, default=20_000)
    p.add_argument("--batch-chunks", type=int, default=4, help="chunks per minibatch")
    p.add_argument("--test-chunks", type=int, default=4, help="chunks held out to measure accuracy on")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--out", default="demo_loss.png", help="where to write the loss curve")
    args = p.parse_args(argv)

    if args.scheduler_file or args.address:
        client, cluster = dg.connect(args.address or "local", scheduler_file=args.scheduler_file), None
    else:  # worker processes: single-threaded BLAS each (the nanny sets OMP_NUM_THREADS=1)
        client = dg.connect("local", n_workers=2, threads_per_worker=1, processes=True)
        cluster = client.cluster
    dashboard = client.dashboard_link
    print(f"daskgrad {dg.__version__}: {len(client.scheduler_info()['workers'])} workers")
    print(f"  dashboard      {dashboard}")
    print(f"  daskgrad page  {dashboard.rsplit('/', 1)[0]}/daskgrad")

    X, y = make_data(args.rows, args.features, args.classes, args.chunk_rows)
    dg.manual_seed(1)
    model = model_for(args.features, args.classes)
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.Adam(model.parameters(), lr=args.lr)
    batch = args.chunk_rows * args.batch_chunks
    test_rows = args.chunk_rows * args.test_chunks  # the last rows: never trained on
    train_rows = args.rows - test_rows
    steps = train_rows // batch
    if steps < 1:
        p.error(f"--rows {args.rows} leaves {train_rows} rows for training after {test_rows} held out: "
                f"less than one minibatch of {batch}")
    print(f"data: {args.rows:,} x {args.features} float32 in {X.array.npartitions} chunks; "
          f"{steps} minibatches of {batch:,} rows per epoch, {test_rows:,} rows held out")

    from tqdm import tqdm

    losses, step_losses, t0 = [], [], time.perf_counter()
    bar = tqdm(total=args.epochs * steps, unit="step", desc="training")
    for epoch in range(args.epochs):
        epoch_losses = []
        for i in range(steps):
            xb, yb = X[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch]
            loss = criterion(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()              # the step's one submission
            optimizer.step()             # lazy: computed by the next submission
            epoch_losses.append(loss.item())  # already computed by backward: no new work
            bar.set_postfix(loss=f"{epoch_losses[-1]:.4f}")
            bar.update()
        step_losses += epoch_losses
        losses.append(float(np.mean(epoch_losses)))
        bar.write(f"epoch {epoch + 1}: mean loss {losses[-1]:.4f}")
    bar.close()
    elapsed = time.perf_counter() - t0
    with dg.no_grad():
        X_test, y_test = X[train_rows:], y[train_rows:]
        accuracy, majority = dg.compute(dg.mean(dg.argmax(model(X_test), axis=1) == y_test),
                                        dg.bincount(y_test, minlength=args.classes).max() / test_rows)
    print(f"{args.epochs * steps} steps in {elapsed:.1f} s ({elapsed / (args.epochs * steps):.2f} s/step)")
    print(f"held-out accuracy {float(accuracy):.3f} on {test_rows:,} rows not trained on "
          f"(the most frequent class alone: {float(majority):.3f})")
    print("gradient check (float64 finite differences on 6 rows):",
          "passed" if check_gradients(model, X, y) else "FAILED")
    plot(step_losses, steps, args.classes, args.out)
    print(f"loss curve written to {args.out}")
    client.close()
    if cluster is not None:
        cluster.close()
    return losses


if __name__ == "__main__":
    main()

"""`make demo` is the main job: its script runs end to end at a small size."""
import os
import re
import subprocess
import sys
import warnings

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(os.path.dirname(HERE), "daskgrad", "")  # a frame of daskgrad's code names this


def test_demo_trains_checks_gradients_and_writes_the_loss_curve(tmp_path):
    pytest.importorskip("tqdm")
    pytest.importorskip("matplotlib")
    out = tmp_path / "loss.png"
    run = subprocess.run([sys.executable, os.path.join(HERE, "..", "examples", "demo.py"), "--rows", "20000",
                          "--chunk-rows", "5000", "--batch-chunks", "1", "--test-chunks", "1", "--epochs", "2",
                          "--out", str(out)],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "daskgrad page  http://127.0.0.1:" in run.stdout
    assert run.stdout.count("mean loss") == 2
    assert "gradient check (float64 finite differences on 6 rows): passed" in run.stdout
    # accuracy on rows held out of training (the last chunk: 5,000 of 20,000), beside the majority class's
    held_out = re.search(r"held-out accuracy (\d\.\d+) on 5,000 rows not trained on "
                         r"\(the most frequent class alone: (\d\.\d+)\)", run.stdout)
    assert held_out and 0 <= float(held_out.group(1)) <= 1 and 0 < float(held_out.group(2)) <= 1, run.stdout
    assert "3 minibatches of 5,000 rows per epoch, 5,000 rows held out" in run.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Traceback" not in run.stdout
    # the embedded cluster shuts down quietly: no traceback through daskgrad or the script.  (On a
    # machine overloaded by the rest of the suite, distributed may log one of its own while a worker
    # process is killed for stopping late: shown as a warning, with the text, not failed on.)
    for trace in tracebacks(run.stderr):
        assert PACKAGE not in trace and "demo.py" not in trace, trace
        warnings.warn(f"distributed logged a traceback as the demo's cluster shut down:\n{trace}")
    losses = [float(line.rsplit(" ", 1)[1]) for line in run.stdout.splitlines() if "mean loss" in line]
    assert losses[1] < losses[0]


def tracebacks(text):
    """Each traceback in ``text`` with the log line before it and the exception line after it."""
    return [m.group(0) for m in re.finditer(r"(?m)^.*\n?Traceback \(most recent call last\):\n(?:[ \t].*\n)*.*", text)]


def test_tracebacks_finds_each_logged_traceback():
    text = ("ok\n2026 - distributed.nanny - ERROR - boom\nTraceback (most recent call last):\n"
            '  File "x.py", line 1, in f\n    g()\nOSError: gone\nafter\n')
    (trace,) = tracebacks(text)
    assert trace.startswith("2026 - distributed.nanny") and trace.endswith("OSError: gone")


def test_the_loss_plot_shows_every_step_each_epoch_s_mean_and_the_uniform_guess_for_reference():
    pytest.importorskip("matplotlib")
    import math

    import matplotlib.pyplot as plt

    sys.path.insert(0, HERE)
    from conftest import example

    demo = example("demo")
    step_losses = [1.1, 1.0, 0.9, 0.85, 0.8, 0.78]
    fig = demo.plot(step_losses, steps_per_epoch=3, classes=3)
    try:
        (ax,) = fig.axes
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert list(lines["minibatch loss"].get_ydata()) == step_losses  # a point per step, not per epoch
        assert list(lines["epoch mean"].get_xdata()) == [3, 6]
        assert set(lines["uniform guess, log 3"].get_ydata()) == {math.log(3)}
    finally:
        plt.close(fig)

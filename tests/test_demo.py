"""`make demo` is the main job: its script runs end to end at a small size."""
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
HERE = os.path.dirname(os.path.abspath(__file__))


def test_demo_trains_checks_gradients_and_writes_the_loss_curve(tmp_path):
    pytest.importorskip("tqdm")
    pytest.importorskip("matplotlib")
    out = tmp_path / "loss.png"
    run = subprocess.run([sys.executable, os.path.join(HERE, "..", "examples", "demo.py"), "--rows", "20000",
                          "--chunk-rows", "5000", "--batch-chunks", "2", "--epochs", "2", "--out", str(out)],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "daskgrad page  http://127.0.0.1:" in run.stdout
    assert run.stdout.count("mean loss") == 2
    assert "gradient check (float64 finite differences on 6 rows): passed" in run.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Traceback" not in run.stdout + run.stderr  # the embedded cluster shuts down quietly
    losses = [float(line.rsplit(" ", 1)[1]) for line in run.stdout.splitlines() if "mean loss" in line]
    assert losses[1] < losses[0]

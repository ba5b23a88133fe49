"""Regenerate docs/dashboard.png: an MLP training step (Linear-ReLU-Linear, cross-entropy) on a local
cluster, its graph retained, the daskgrad page captured by headless chromium:
PYTHONPATH=. python docs/dashboard_screenshot.py"""
import os
import sys
import time

import numpy as np

import daskgrad as dg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from browser import PAGE_STATE_JS, Chromium, chromium_or_reason  # noqa: E402

if __name__ == "__main__":
    client = dg.connect("local", n_workers=2, threads_per_worker=1, dashboard_address="127.0.0.1:0")
    port = client.cluster.scheduler.http_server.port
    from daskgrad import nn

    rng = np.random.default_rng(0)
    X = dg.from_array(rng.standard_normal((40_000, 20)).astype("float32"), chunks=(5_000, 20))
    y = dg.from_array(rng.integers(0, 3, 40_000), chunks=5_000)
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 3))
    loss = nn.functional.cross_entropy(model(X), y)
    loss.backward(retain_graph=True)
    path, why = chromium_or_reason()
    if path is None:
        sys.exit(why)
    browser = Chromium(path, width=1200, height=820)
    try:
        browser.goto(f"http://127.0.0.1:{port}/daskgrad")
        browser.wait_for(f"(() => {{ const s = {PAGE_STATE_JS}; return s.canvases >= 2 && "
                         "s.text.includes('Backward0'); })()", timeout=60)
        browser.wait_for("(() => { const d = window.Bokeh && Bokeh.documents[0] && "
                         "Bokeh.documents[0].get_model_by_name('daskgrad-rules'); "
                         "return d && Array.from(d.data.rule).includes('matmul-vjp'); })()", timeout=60)
        time.sleep(1)  # let the periodic update settle the layout
        browser.screenshot(os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboard.png"))
    finally:
        browser.close()
        client.close()
        client.cluster.close()

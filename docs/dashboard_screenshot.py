"""Regenerate docs/dashboard.png: a small training step on a local cluster, its graph retained,
the daskgrad page captured by headless chromium:  PYTHONPATH=. python docs/dashboard_screenshot.py"""
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
    rng = np.random.default_rng(0)
    x = dg.from_array(rng.normal(size=(4000, 20)), chunks=(500, 20))
    y = dg.from_array(rng.normal(size=(4000, 1)), chunks=(500, 1))
    w1 = dg.from_array(rng.normal(size=(20, 16)) * 0.1, chunks=(20, 16), requires_grad=True)
    w2 = dg.from_array(rng.normal(size=(16, 1)) * 0.1, chunks=(16, 1), requires_grad=True)
    loss = ((dg.tanh(x @ w1) @ w2 - y) ** 2).mean()
    loss.backward(retain_graph=True)
    path, why = chromium_or_reason()
    if path is None:
        sys.exit(why)
    browser = Chromium(path, width=1200, height=820)
    try:
        browser.goto(f"http://127.0.0.1:{port}/daskgrad")
        browser.wait_for(f"(() => {{ const s = {PAGE_STATE_JS}; return s.canvases >= 2 && "
                         "s.text.includes('Backward0'); })()", timeout=60)
        time.sleep(1)  # let the periodic update settle the layout
        browser.screenshot(os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboard.png"))
    finally:
        browser.close()
        client.close()
        client.cluster.close()

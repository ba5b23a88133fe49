"""daskgrad's dashboard page: the JSON route's retained graphs, backward progress and per-rule times,
the `--preload daskgrad.dashboard` path of a CLI scheduler, and the page rendered in a real headless
chromium.  Every request goes to 127.0.0.1."""
import json
import os
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

import daskgrad as dg

from browser import PAGE_STATE_JS, Chromium, chromium_or_reason

pytestmark = pytest.mark.cluster


def _get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.status, r.read()


def _api(port):
    return json.loads(_get(port, "/daskgrad/api.json")[1])


def _eventually(port, pred, timeout=30):
    """The client publishes retained keys asynchronously: wait until the route shows them."""
    deadline = time.monotonic() + timeout
    while True:
        data = _api(port)
        if pred(data) or time.monotonic() > deadline:
            return data
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster():
    client = dg.connect("local", n_workers=2, threads_per_worker=1, dashboard_address="127.0.0.1:0")
    yield client, client.cluster.scheduler.http_server.port
    client.close()
    client.cluster.close()


def _retained_backward():
    a = dg.from_array(np.arange(8.0), chunks=2, requires_grad=True)
    b = dg.from_array(np.ones(8), chunks=2, requires_grad=True)
    c = dg.from_array(np.full(8, 2.0), chunks=2, requires_grad=True)
    loss = (dg.exp(a) + b * c).sum()
    loss.backward(retain_graph=True)  # ExpBackward0 keeps its result: 4 chunks of 2 float64
    return loss


def test_json_route_shows_retained_keys_bytes_progress_and_rule_times(cluster):
    client, port = cluster
    loss = _retained_backward()
    try:
        data = _eventually(port, lambda d: any(r["node"] == "ExpBackward0" for r in d["retained"]))
        (row,) = [r for r in data["retained"] if r["node"] == "ExpBackward0"]
        (report,) = [r for r in dg.memory_report() if r["node"] == "ExpBackward0"]
        assert sorted(map(tuple, row["keys"])) == sorted(report["keys"]) and len(row["keys"]) == 4
        assert row["bytes"] == report["bytes"]  # a chunk copied to both workers counts on both
        assert row["nbytes"] == sum(row["bytes"].values()) == data["retained_nbytes"] >= 8 * 8
        assert set(row["bytes"]) <= set(client.scheduler_info()["workers"])

        b = data["backward"]
        assert b["span"] == "daskgrad/backward" and not b["running"]
        assert b["done"] == b["total"] > 0 and b["vjp_done"] == b["vjp_total"] == 4 + 8
        assert b["erred"] == 0  # (the tasks of rule outputs: exp-vjp's for a, mul-vjp's for b and c)

        # the rules ran inside one fused task a chunk, which hands on a's, b's and c's gradients:
        # the workers' metrics (with their heartbeats) say what ran inside; the tasks that only
        # hand a value on are not counted as tasks a rule ran in, before or after they come
        def metered(d):
            return "exp-vjp" in d["backward"]["rules"]

        assert "exp-vjp" not in b["rules"] or metered(data)
        b = _eventually(port, metered)["backward"]
        assert {r: b["rules"][r]["tasks"] for r in ("exp-vjp", "mul-vjp")} == {"exp-vjp": 4, "mul-vjp": 4}
        assert b["other"]["(handed on)"]["tasks"] == 4 + 8 + 4  # the gradients, and exp(a) (retained)
        assert all(r["seconds"] >= 0 for r in b["rules"].values())
    finally:
        dg.release_graph(loss)
    data = _eventually(port, lambda d: not d["retained"])
    assert data["retained"] == [] and data["retained_nbytes"] == 0


def test_a_fused_backwards_time_is_attributed_to_the_rules_that_ran_inside_its_tasks(cluster):
    _, port = cluster
    X = dg.from_array(np.random.default_rng(0).random((64, 3)), chunks=(16, 3))
    w = dg.from_array(np.ones(3), requires_grad=True)
    (dg.tanh(X @ w) ** 2).sum().backward()  # per chunk: matmul, tanh, pow and their rules, one task

    def attributed(d):
        b = d["backward"]
        return b is not None and not b["running"] and "tanh-vjp" in b["rules"]

    b = _eventually(port, attributed)["backward"]  # the workers' metrics come with their heartbeats
    assert {"tanh-vjp", "pow-vjp"} <= set(b["rules"]) and {"tanh", "pow"} <= set(b["other"])
    assert not any(name.endswith("-fused") for name in {**b["rules"], **b["other"]})
    assert b["rules"]["tanh-vjp"]["tasks"] == 4  # the four fused tasks it ran in, one per chunk
    assert all(r["seconds"] >= 0 for r in {**b["rules"], **b["other"]}.values())
    assert w.grad is not None


def _row_blocks(size):
    import dask
    dask.config.set({"daskgrad.row-block-bytes": size})


def test_a_fused_task_run_over_row_blocks_still_attributes_its_time_to_the_rules(cluster):
    client, port = cluster
    client.run(_row_blocks, "2 MiB")  # (opt-in: set where the tasks run)
    try:
        _row_blocked_backward(port)
    finally:
        client.run(_row_blocks, 0)


def _row_blocked_backward(port):
    X = dg.from_array(np.random.default_rng(1).random((80_000, 30)), chunks=(40_000, 30))  # 9.6 MB chunks
    w = dg.from_array(np.ones(30) / 30, requires_grad=True)
    (dg.sigmoid(X @ w) ** 3).sum().backward()

    def attributed(d):
        b = d["backward"]
        return b is not None and not b["running"] and "sigmoid-vjp" in b["rules"]

    b = _eventually(port, attributed)["backward"]
    assert {"sigmoid-vjp", "pow-vjp"} <= set(b["rules"]) and {"sigmoid", "pow"} <= set(b["other"])
    assert b["rules"]["sigmoid-vjp"]["tasks"] == 2 and b["rules"]["sigmoid-vjp"]["seconds"] > 0


def test_the_page_is_served_and_linked_from_the_dashboard_nav_bar(cluster):
    _, port = cluster
    status, page = _get(port, "/daskgrad")
    assert status == 200 and b"Bokeh" in page and b">Daskgrad<" in page
    assert b'href="daskgrad"' in _get(port, "/status")[1]  # the nav bar of the other pages


def test_a_cli_scheduler_with_preload_serves_the_json_route(tmp_path):
    sched_file = tmp_path / "sched.json"
    proc = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                             "--port", "0", "--dashboard-address", "127.0.0.1:0", "--preload", "daskgrad.dashboard",
                             "--scheduler-file", str(sched_file)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    try:
        deadline = time.monotonic() + 60
        while not sched_file.exists() or not sched_file.read_text():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        port = json.loads(sched_file.read_text())["services"]["dashboard"]
        data = _api(port)
        assert data["retained"] == [] and data["backward"] is None
    finally:
        proc.kill()
        proc.wait()


def test_headless_chromium_renders_the_page(cluster, tmp_path):
    path, why = chromium_or_reason()
    if path is None:
        pytest.skip(why)
    _, port = cluster
    loss = _retained_backward()
    _eventually(port, lambda d: d["retained"])
    browser = Chromium(path)
    try:
        browser.goto(f"http://127.0.0.1:{port}/daskgrad")
        rendered = (f"(() => {{ const s = {PAGE_STATE_JS}; return s.canvases >= 2 "
                    "&& s.text.includes('ExpBackward0') && s.text.includes('tasks done'); })()")
        browser.wait_for(rendered, timeout=60)
        state = browser.evaluate(PAGE_STATE_JS)
        shot = tmp_path / "dashboard.png"
        browser.screenshot(str(shot))
        assert browser.errors == []
    finally:
        browser.close()
        dg.release_graph(loss)
    assert state["title"] == "Dask: daskgrad"
    assert "Retained graphs: 1 nodes" in state["text"]
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000  # a blank page compresses to a few kB


# ------------------------------------------------------------------ which rule is slow, for an nn model
# layers that matmul's and relu's rules build on the way (no forward op of this model makes them)
RULE_INTERNALS = {"matmul_partial", "le"}


def _mlp_step(seed=0, retain_graph=False):
    """One training step of Linear-ReLU-Linear with cross-entropy on 40,000 rows in 8 chunks."""
    from daskgrad import nn

    rng = np.random.default_rng(seed)
    X = dg.from_array(rng.standard_normal((40_000, 20)).astype("float32"), chunks=(5_000, 20))
    y = dg.from_array(rng.integers(0, 3, 40_000), chunks=5_000)
    dg.manual_seed(seed)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 3))
    loss = nn.functional.cross_entropy(model(X), y)
    loss.backward(retain_graph=retain_graph)
    return model, loss


def _attributed_mlp(d):
    # (the workers' metrics and the names of the layers the client lowered reach the page separately:
    # wait until the parts are named, or time out and let the assertions say what is missing)
    b = d["backward"]
    return (b is not None and not b["running"] and {"matmul-vjp", "relu-vjp"} <= set(b["rules"])
            and not (set(b["rules"]) | set(b["other"])) & RULE_INTERNALS)


def _is_rule_or_op(name):
    return name.endswith("-vjp") or name in dg.ops.__all__


def test_an_mlp_step_run_as_an_instance_of_its_template_is_attributed_to_the_same_rules(cluster):
    # the third run of a program is an instance of the template its second run made: its keys are the
    # template's renamed (a token appended), and its parts still go under the rules that made them, also
    # when many backwards since have pushed the names of its layers out of the dashboard's record
    from daskgrad._dask import labels

    _, port = cluster
    hits = dg.step_cache_info()["hits"]
    for _ in range(2):
        _mlp_step()
    labels.made_by([f"other-layer-{i}" for i in range(1 << 16)], "other-vjp")
    _mlp_step()
    assert dg.step_cache_info()["hits"] > hits
    b = _eventually(port, _attributed_mlp)["backward"]
    names = set(b["rules"]) | set(b["other"])
    assert not names & RULE_INTERNALS, names & RULE_INTERNALS
    assert b["rules"]["matmul-vjp"]["tasks"] >= 8  # (each of the 8 chunks' VJPs runs in a task)


def test_an_mlp_step_s_time_goes_to_its_vjp_rules_and_forward_ops_with_rows_of_no_time_folded(cluster):
    _, port = cluster
    model, _ = _mlp_step()
    b = _eventually(port, _attributed_mlp)["backward"]
    names = set(b["rules"]) | set(b["other"])
    # the partial products of matmul's rule, relu's where and comparison: under the rules that made them
    assert not names & RULE_INTERNALS, names & RULE_INTERNALS
    assert b["rules"]["matmul-vjp"]["tasks"] >= 8 and b["rules"]["relu-vjp"]["tasks"] >= 8  # (a part a chunk at least)
    assert not any(name.endswith("-fused") for name in names)
    chart = b["chart"]
    assert [r["seconds"] for r in chart] == sorted((r["seconds"] for r in chart), reverse=True)
    assert b["folded"]["rows"] > 0 and len(chart) + b["folded"]["rows"] == len(names)
    assert all(r["seconds"] >= max(1e-3, 0.01 * chart[0]["seconds"]) for r in chart)
    # the largest bar is work (a rule or a forward op: matmul's rule or the linear layers' add), and
    # rules and ops hold most of the time; the order of the smaller bars (values handed on out of
    # fused groups, the targets' check) is the machine's timings, so it is not asserted
    assert _is_rule_or_op(chart[0]["name"]), chart[:3]
    work = sum(r["seconds"] for r in chart if _is_rule_or_op(r["name"]))
    assert work > 0.5 * sum(r["seconds"] for r in chart), chart
    assert all(p.grad is not None for p in model.parameters())


def test_headless_chromium_shows_an_mlp_step_s_largest_bars_as_vjp_rules_and_forward_ops(cluster, tmp_path):
    from daskgrad._dask.dashboard import short_key

    path, why = chromium_or_reason()
    if path is None:
        pytest.skip(why)
    _, port = cluster
    _, loss = _mlp_step(seed=1, retain_graph=True)  # its saved values: the retained table's keys
    data = _eventually(port, lambda d: _attributed_mlp(d) and d["retained"])
    shown_key = short_key(data["retained"][0]["keys"][0])  # "maximum (0, 0)": prefix and block
    browser = Chromium(path)
    try:
        browser.goto(f"http://127.0.0.1:{port}/daskgrad")
        bars = ("(() => { const d = (window.Bokeh && Bokeh.documents[0]) ? "
                "Bokeh.documents[0].get_model_by_name('daskgrad-rules') : null; "
                "return d ? {rule: Array.from(d.data.rule), seconds: Array.from(d.data.seconds), "
                "kind: Array.from(d.data.kind)} : null; })()")
        # (the page polls the server: wait until it draws the rules; relu's takes about a millisecond, so on a
        # quiet machine it may be folded into the rows of ~0 s: drawn, or folded, not a timing to wait for)
        browser.wait_for(f"(() => {{ const b = {bars}; return b && b.rule.includes('matmul-vjp'); }})()", timeout=60)
        browser.wait_for(f"(() => {{ const s = {PAGE_STATE_JS}; return s.text.includes({json.dumps(shown_key)}); }})()",
                         timeout=60)
        drawn = browser.evaluate(bars)
        state = browser.evaluate(PAGE_STATE_JS)
        browser.screenshot(str(tmp_path / "mlp.png"))
        assert browser.errors == []
    finally:
        browser.close()
        dg.release_graph(loss)
    largest = sorted(zip(drawn["seconds"], drawn["rule"], drawn["kind"]), reverse=True)
    # the largest bar is work and rules and ops hold most of the time (the order of the small bars is
    # the machine's timings)
    assert _is_rule_or_op(largest[0][1]), largest
    assert sum(s for s, name, _ in largest if _is_rule_or_op(name)) > 0.5 * sum(s for s, _, _ in largest), largest
    assert "matmul-vjp" in drawn["rule"] and not set(drawn["rule"]) & RULE_INTERNALS  # (relu-vjp: the server's
    # rules hold it (_attributed_mlp above); the page draws it unless it ran for about no time, then folds it)
    assert all(kind == ("VJP rule" if name.endswith("-vjp") else "forward op") for _, name, kind in largest)
    assert "more kinds of task ran for about no time" in state["text"]  # the rows of ~0 s, folded
    assert shown_key in state["text"]  # the keys column: prefix and block, not a cut-off token

"""The benchmark suite runs end to end in quick mode (tiny sizes), so `make bench` cannot rot:
every component reports, its numbers are finite, and the plots are written."""
import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


@pytest.fixture(scope="module")
def quick_suite(tmp_path_factory):
    """One run of the whole suite in quick mode (every component, the issue "One program, many runs"'s
    among them): its process, its report and the folder it wrote to, for both tests below."""
    tmp_path = tmp_path_factory.mktemp("bench")
    proc = _run_quick(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads((tmp_path / "suite-quick.json").read_text()), tmp_path


def test_benchmark_suite_runs_in_quick_mode_and_writes_every_component(quick_suite):
    proc, report, tmp_path = quick_suite
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import run_all

    assert set(run_all.COMPONENTS) <= set(report)
    for name in ("logreg", "mlp", "chain"):
        assert all(math.isfinite(v) and v > 0 for v in report[name]["seconds"].values()), name
    assert "daskgrad[default_blas]" in report["logreg"]["seconds"]
    assert report["out_of_core"]["restarted"] is False
    assert report["out_of_core"]["predicted_peak_bytes"] > 0
    assert [r["chunks"] for r in report["graph_cost"]["rows"]] == [10, 100]
    assert report["loop"]["late_over_early"] > 0
    assert [r["chunks"] for r in report["overhead"]["rows"]] == [20, 200]
    assert all(r["tasks_per_chunk"] > 0 and r["daskgrad_over_handwritten"] > 0 for r in report["overhead"]["rows"])
    prot = report["protection"]
    assert prot["step_time"]["mlp_adam"]["protected_over_unprotected"] > 0
    held = prot["step_time"]["mlp_adam"]["holders_of_parameter_chunks"]
    assert min(held["copies=2"]) >= 2 and min(held["copies=1"]) == 1, held  # the setting took effect
    assert min(prot["memory"]["copies=2"]["holders_of_u_chunks"]) >= 2
    assert min(prot["memory"]["copies=1"]["holders_of_u_chunks"]) == 1
    for variant in ("with_daskgrad_span", "without_daskgrad_span"):
        assert math.isfinite(report["memory_soak"][variant]["slopes_per_step_second_half"]["client_rss"]), variant
    row = report["revolve"]["rows"][0]
    assert row["step_evaluations_on_workers"] == row["expected_t_plus_last_step"]
    assert report["fwi"]["recompute_factor"] > 1 and report["fwi"]["peak_managed"] > 0
    # estimate_memory predicts the checkpointed backwards' peaks within 1.5x (issue 20 point 5); even at the
    # quick sizes those peaks are mostly states, not constants (revolve ~10 states, fwi ~20 wavefields).
    # The revolve row runs on dask's single-thread scheduler, whose order the estimate simulates exactly:
    # the same every run (estimate / measured 1.05).
    assert row["peak_states"] >= 3
    assert 1 / 1.5 <= row["predicted_over_measured"] <= 1.5, row
    assert report["fwi"]["peak_managed"] >= 5 * report["fwi"]["field_bytes"]
    # The FWI runs on a worker process, whose order depends on when the scheduler's messages arrive: its
    # peak (read after every task transition) varied 137-153 kB in eleven runs of the quick problem, whose
    # tasks take microseconds, against an estimate of 193 kB (1.26-1.41x).  The bound here is one no run
    # came near (2x: a peak under 97 kB, 0.7x the lowest seen).
    assert 1 / 1.5 <= report["fwi"]["estimate_over_measured"] <= 2, report["fwi"]
    assert report["fwi"]["grad_norm"] > 0  # the receivers near the sources: the wave reaches them
    vs_torch = report["fwi_vs_torch"]  # the same gradient as PyTorch's, plain and checkpointed
    assert {"daskgrad_cpu", "daskgrad_cpu_checkpointed", "pytorch_cpu"} <= set(vs_torch["seconds"])
    assert max(vs_torch["max_abs_difference_vs_pytorch_cpu"].values()) <= 1e-10, vs_torch
    assert vs_torch["gradient_norm_pytorch_cpu"] > 0  # (the receivers near the sources: the wave reaches them)
    assert set(vs_torch["first_seconds"]) == set(vs_torch["tasks_per_step"]) == {"daskgrad_cpu",
                                                                                  "daskgrad_cpu_checkpointed"}
    assert all(v > 0 for v in vs_torch["tasks_per_step"].values())
    assert "| FWI gradient" in proc.stdout
    big = report["big_state"]
    assert big["step_evaluations_on_workers"] == big["revolve_t_plus_last_step"]
    assert big["peak_managed_per_worker"] > 0 and big["grad_norm"] > 0 and big["grad_finite"]
    assert big["bands"] > big["n_workers"] and big["restarted"] is False
    det = report["deterministic"]["cluster"]
    assert det["on"]["distinct_bit_patterns"] == 1 and report["deterministic"]["on_over_off"]["cluster"] > 0
    assert "| logreg |" in proc.stdout  # the README table
    if "matplotlib" in sys.modules or _importable("matplotlib"):
        for png in ("logreg", "mlp", "chain", "graph_cost", "cluster", "loop", "protection", "memory_soak",
                    "fwi_vs_torch"):
            assert (tmp_path / f"{png}.png").stat().st_size > 0, png


def test_one_program_many_runs_components_report_agreeing_numbers(quick_suite, tmp_path):
    """The components of issue "One program, many runs", read from the quick suite's run (this test ran
    them a second time, by name): each program's daskgrad port gives its original's numbers (the
    component asserts rtol 1e-10; the report says so), step calls are counted, the package's size is
    read.  No timing is asserted on.  Components chosen by name run alone: the cheapest, package, is run
    so."""
    names = ["programs", "plain_loop", "checkpoint_block", "demo_step", "minibatch_loop", "package"]
    proc, report, _ = quick_suite
    assert set(names) <= set(report)
    alone = _run_quick(tmp_path, "package")
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert set(json.loads((tmp_path / "suite-quick.json").read_text())) == {"quick", "machine", "package"}
    assert "| package size |" in alone.stdout
    programs = report["programs"]
    assert sorted(programs["rows"]) == ["a_two_layer_net_autograd", "b_regression", "c_logistic_regression",
                                        "d_neural_net_adam", "e_rosenbrock"]
    for name, row in programs["rows"].items():
        assert row["agree"] and row["max_relative_difference"] <= 1e-10, name
        assert all(math.isfinite(v) and v > 0 for v in row["seconds_per_iteration"].values()), name
    assert programs["median_daskgrad_over_original"] > 0
    import daskgrad.nn.functional as F

    # a missing op is reported, not papered over: regression/main.py calls F.smooth_l1_loss
    assert ("missing_in_daskgrad" in programs["rows"]["b_regression"]) == (not hasattr(F, "smooth_l1_loss"))
    plain = report["plain_loop"]
    assert plain["ms_per_chunk_plain_loop_200_tiny_chunks_no_compile"] > 0
    assert plain["pytorch_ms_per_step_whole_data"] > 0 and plain["max_relative_difference_of_w"] <= 1e-10
    block = report["checkpoint_block"]
    for name, row in block["rows"].items():
        # step is called on the client once per step at least, and no more than Revolve's t + steps (the README's
        # count when each recomputation called it again)
        assert block["steps"] <= row["step_calls"] <= block["revolve_t"] + block["steps"], (name, row)
        assert row["max_relative_difference_of_c_grad"] <= 1e-10 and row["c_grad_norm"] > 0, name
    demo = report["demo_step"]
    assert demo["steps_run"] >= 4 and demo["max_relative_loss_difference"] <= 1e-4
    assert set(demo["seconds_per_step"]) == {"daskgrad_demo_step", "pytorch_step"}
    minibatches = report["minibatch_loop"]
    assert minibatches["programs_lowered_after_first_epoch"] == 0  # (every minibatch's step: one program)
    assert minibatches["max_relative_loss_difference_first_two_epochs"] <= 1e-4 and minibatches["steps_run"] >= 24 * 3
    lines = 0
    for dirpath, _, files in os.walk(os.path.join(ROOT, "daskgrad")):
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                    lines += sum(1 for line in fh if line.strip())
    assert report["package"]["non_blank_lines"] == lines > 1000
    for row in ("| program a_two_layer_net_autograd |", "| programs | median over 5 |",
                "| plain loop, 200 tiny chunks, no compile |", "| make demo's training step |",
                "| training loop over small minibatches, threads |", "| package size |"):
        assert row in proc.stdout, row


def _run_quick(results, *names):
    """benchmarks/run_all.py in quick mode (the components ``names``, or all), writing to ``results``."""
    env = dict(os.environ, BENCH_QUICK="1", BENCH_RESULTS=str(results),
               PYTHONPATH=os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    return subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "run_all.py"), *names], env=env,
                          capture_output=True, text=True, timeout=300)


def _importable(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None

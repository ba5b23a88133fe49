"""The notebooks of examples/ run from top to bottom in a Jupyter kernel (nbclient), as a user runs them."""
import os
import pathlib

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _started_client(nb, cwd):
    """A client with its kernel started, or a skip saying why the kernel could not start (a machine
    without ipykernel or its kernel spec): a cell that fails later is a failure, never a skip."""
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=False)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    try:
        client.km = client.create_kernel_manager()
        client.start_new_kernel(cwd=str(cwd), env=env)
        client.start_new_kernel_client()
    except Exception as err:  # noqa: BLE001 - jupyter_client raises several kinds (no spec, kernel died)
        if client.km is not None and client.km.has_kernel:
            client.km.shutdown_kernel(now=True)
        pytest.skip(f"the Jupyter kernel could not start: {type(err).__name__}: {err}")
    return client


@pytest.mark.slow
def test_quickstart_notebook_runs_and_shows_tensors_with_their_html_repr(tmp_path):
    nb = nbformat.read(ROOT / "examples" / "quickstart.ipynb", as_version=4)
    _started_client(nb, tmp_path).execute()  # shuts the kernel down after the last cell
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("Dask graph" in h and "is_leaf" in h for h in html)  # dask's chunk table, the autograd fields
    assert any("BinaryCrossEntropyWithLogitsBackward0" in h for h in html)  # the loss, with its grad_fn
    assert any("<pre>tensor([[ 0.5000, -1.0000]," in h for h in html)  # a small tensor's values
    printed = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "daskgrad page: http://127.0.0.1:" in printed and "/daskgrad" in printed  # the dashboard is on
    plain = [o["data"]["text/plain"] for o in outputs if "text/plain" in o.get("data", {})]
    # a gradient held on the cluster's workers: dask's summary, not a gather
    assert plain[-1].startswith("tensor(dask.array<shape=(16, 8)")

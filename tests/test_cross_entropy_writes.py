"""A write to CrossEntropyLoss's target (or class weights) after its forward makes the backward raise torch's
in-place error, as torch's (its nll_loss saves them); a write to the logits does not (its log_softmax saves its
result).  Found by review: the backward computed with the old target."""
import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")


def _run(lib, written, probabilities):
    rng = np.random.default_rng(4)
    xn, wn = rng.standard_normal((30, 4)), rng.standard_normal((3, 4))
    yn = rng.random((30, 3)) if probabilities else rng.integers(0, 3, 30)
    cw = np.array([0.5, 1.0, 2.0])
    if lib == "dg":
        x, y = dg.from_array(xn, chunks=(10, 4)), dg.from_array(yn, chunks=10 if not probabilities else (10, 3))
        w, c = dg.from_array(wn, chunks=-1).requires_grad_(), dg.from_array(cw, chunks=-1)
        loss = dg.nn.CrossEntropyLoss(weight=c, label_smoothing=0.1)(x @ w.T, y)
    else:
        x, y, w, c = (torch.from_numpy(a.copy()) for a in (xn, yn, wn, cw))
        w.requires_grad_()
        loss = torch.nn.CrossEntropyLoss(weight=c, label_smoothing=0.1)(x @ w.T, y)
    z = {"target": y, "weight": c}.get(written)
    if z is not None:
        z.mul_(0) if probabilities or written == "weight" else z.fill_(1)
    try:
        loss.backward()
    except RuntimeError as e:
        return str(e).split(";")[0].split(":")[0]
    return w.grad.numpy()


@pytest.mark.parametrize("probabilities", [False, True])
@pytest.mark.parametrize("written", ["target", "weight", None])
def test_a_write_to_the_target_or_weight_raises_as_torch_s(written, probabilities):
    got, want = _run("dg", written, probabilities), _run("torch", written, probabilities)
    if isinstance(want, str):
        assert got == want
    else:
        np.testing.assert_allclose(got, want, rtol=1e-10)

# The names the examples of the API reference use; tests/test_docstring_examples.py runs each example
# after this (a fresh copy for each docstring), in an empty directory, on dask's synchronous scheduler.
import math  # noqa: F401  (the examples use it)

import numpy as np

import daskgrad as dg
import daskgrad.nn.functional as F  # noqa: F401  (the examples use it)
from daskgrad import nn, optim

dg.manual_seed(0)
x = dg.randn(64, 4, chunks=(16, 4))                  # a batch: 64 rows of 4 features, in 4 chunks
y = dg.tensor(np.arange(64) % 3)                     # its class labels
images = dg.randn(8, 8, 5, 5, chunks=(4, 8, 5, 5))   # a batch of 8-channel 5 x 5 images
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
opt = optim.SGD(model.parameters(), lr=0.1)
loss_fn = nn.CrossEntropyLoss()
loss = loss_fn(model(x), y)
logits, labels = model(x), y
layer = nn.Linear(4, 8)
block = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
w, b = dg.randn(3, 4, requires_grad=True), dg.zeros(3)   # a weight (out, in) and a bias
f = lambda w: (w ** 2).sum()                          # noqa: E731  (a scalar function of w)
step, n = 1, 3


def train():
    opt.zero_grad()
    loss_fn(model(x), y).backward()

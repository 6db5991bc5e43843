"""Lab 8's weight-pass timing (course/labs/lab08_linears.py): every Linear layer of the default model
once with B rows, a minimum over repeats, and the bytes of weights that pass reads."""
from __future__ import annotations

import torch

from course.labs import lab08_linears


def test_linear_pass_times_each_batch_and_counts_the_weights():
    t = lab08_linears.linear_pass_ms((1, 4), repeats=2)
    assert set(t) == {1, 4} and all(v > 0 for v in t.values())
    model = lab08_linears._model()
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert layers
    assert lab08_linears.weight_bytes() == sum(m.weight.numel() * m.weight.element_size() for m in layers)

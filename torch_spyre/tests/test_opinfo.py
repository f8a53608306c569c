"""A slice of PyTorch's own device-generic tests against `spyre`: the OpInfo sample inputs
(torch.testing._internal.common_methods_invocations.op_db) of every operator that has a spyre
kernel, instantiated for the PrivateUse1 device-type class by instantiate_device_type_tests,
in fp32, fp16 and bf16.

Each sample runs once on spyre under strict mode. If it stays on the card, its outputs must
match the CPU's within the dtype's tolerance (the reference is the CPU op on the sample in fp32,
rounded to the dtype). If a spyre kernel hands it to the CPU fallback, strict mode names the
operator: the sample runs again with the fallback and must give the CPU's answer too, but it
is counted as a fallback, not as a card pass. Every op x dtype must run at least one sample on
the card unless SKIPS lists it with a reason (then the test is skipped, and counted so).
The per-op counts are printed at the end of the run (conftest.pytest_terminal_summary)."""

import collections
import contextlib
import os
import unittest

import torch
import torch_spyre  # noqa: F401  (registers `spyre` before the device-type bases are chosen)
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase
from torch.utils import _pytree as pytree

FLOATS = (torch.float32, torch.float16, torch.bfloat16)

# OpInfo entries whose operators have a spyre kernel (csrc/aten), by (name, variant).
ON_CARD = {
    ("add", ""), ("sub", ""), ("mul", ""), ("div", "no_rounding_mode"), ("rsub", ""),
    ("where", ""), ("masked_fill", ""),
    ("nn.functional.relu", ""), ("nn.functional.gelu", ""), ("nn.functional.silu", ""),
    ("sigmoid", ""), ("tanh", ""), ("exp", ""), ("log", ""), ("neg", ""), ("abs", ""),
    ("sqrt", ""), ("rsqrt", ""), ("reciprocal", ""), ("sin", ""), ("cos", ""),
    ("softmax", ""), ("log_softmax", ""),
    ("nn.functional.layer_norm", ""), ("nn.functional.rms_norm", ""),
    ("sum", ""), ("mean", ""), ("amax", ""), ("argmax", ""),
    ("max", "reduction_no_dim"), ("max", "reduction_with_dim"),
    ("mm", ""), ("bmm", ""), ("addmm", ""), ("matmul", ""), ("baddbmm", ""),
    ("nn.functional.linear", ""), ("nn.functional.embedding", ""),
    ("nn.functional.scaled_dot_product_attention", ""),
    ("cat", ""), ("stack", ""), ("index_select", ""),
    ("gather", ""), ("scatter_add", ""), ("index_copy", ""), ("take_along_dim", ""),
    ("nn.functional.nll_loss", ""),
    ("eq", ""), ("ne", ""), ("lt", ""), ("le", ""), ("gt", ""), ("ge", ""),
    ("maximum", ""), ("minimum", ""), ("max", "binary"), ("min", "binary"),
    ("clamp", ""), ("clamp_min", ""), ("clamp_max", ""),
    ("nn.functional.max_pool2d", ""), ("nn.functional.avg_pool2d", ""),
    ("nn.functional.avg_pool3d", ""), ("nn.functional.local_response_norm", ""),
    ("nn.functional.max_pool3d", ""), ("nn.functional.adaptive_avg_pool3d", ""),
    ("nn.functional.adaptive_max_pool3d", ""), ("nn.functional.adaptive_avg_pool2d", ""),
    ("nn.functional.adaptive_max_pool2d", ""),
    ("nn.functional.prelu", ""), ("trace", ""), ("renorm", ""), ("index_fill", ""),
    ("logcumsumexp", ""), ("i0", ""), ("special.i0e", ""), ("special.i1", ""),
    ("special.i1e", ""), ("nn.functional.multilabel_margin_loss", ""),
    ("nn.functional.ctc_loss", ""),
}

# Ops none of whose OpInfo samples the card takes, with the reason. Their samples still run
# (through the fallback, checked against the CPU), then the test is skipped: counted as a skip.
SKIPS = {}  # (embedding and index_select left it: element gathers take every layout)

# Ops whose result sums over a dimension: rounding grows with its length (atol scaled).
ACCUMULATING = {"sum", "mean", "mm", "bmm", "addmm", "matmul", "baddbmm", "nn.functional.linear",
                "nn.functional.layer_norm", "nn.functional.rms_norm", "softmax", "log_softmax",
                "nn.functional.scaled_dot_product_attention"}

TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 1.5e-1}

# (op name, dtype) -> Counter of "samples", "card", "fallback:<aten op>"
SUMMARY = collections.defaultdict(collections.Counter)

op_list = [o for o in op_db if (o.name, o.variant_test_name) in ON_CARD]
assert len(op_list) == len(ON_CARD), "an OpInfo entry of ON_CARD is missing from op_db"


@contextlib.contextmanager
def strict(on):
    old = os.environ.get("TORCH_SPYRE_STRICT")
    os.environ["TORCH_SPYRE_STRICT"] = "1" if on else ""
    try:
        yield
    finally:
        if old is None:
            del os.environ["TORCH_SPYRE_STRICT"]
        else:
            os.environ["TORCH_SPYRE_STRICT"] = old


def fallback_name(error):
    """The operator strict mode names in its NotImplementedError, or None for another error."""
    text = str(error)
    marker = "torch_spyre: "
    if "fallback" not in text and "no spyre kernel" not in text:
        return None
    start = text.find(marker)
    return text[start + len(marker):].split()[0] if start >= 0 else text.split()[0]


def to_device(sample, device):
    return sample.transform(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t)


def upcast(sample, dtype):
    return sample.transform(
        lambda t: t.float() if isinstance(t, torch.Tensor) and t.dtype == dtype else t)


def run(op, sample):
    return op(sample.input, *sample.args, **sample.kwargs)


def check_close(actual, expected, dtype, scale):
    """Every tensor of the spyre outputs within tolerance of the fp32 reference."""
    flat_a, spec_a = pytree.tree_flatten(actual)
    flat_e, spec_e = pytree.tree_flatten(expected)
    assert spec_a == spec_e, (spec_a, spec_e)
    for a, e in zip(flat_a, flat_e):
        if not isinstance(a, torch.Tensor):
            assert a == e
            continue
        assert a.device.type == "spyre", a.device
        a = a.cpu()
        assert a.shape == e.shape, (a.shape, e.shape)
        if e.dtype.is_floating_point:
            assert a.dtype == (dtype if e.dtype == torch.float32 else e.dtype), (a.dtype, e.dtype)
            torch.testing.assert_close(a.float(), e.to(a.dtype).float(), rtol=TOL[dtype],
                                       atol=TOL[dtype] * scale, equal_nan=True)
        else:
            assert a.dtype == e.dtype, (a.dtype, e.dtype)
            assert torch.equal(a, e), f"\n{a}\n!=\n{e}"


def reduction_length(sample):
    """The largest dim of the inputs: what accumulated rounding scales with."""
    sizes = [max(t.shape, default=1) for t in pytree.tree_leaves((sample.input, sample.args))
             if isinstance(t, torch.Tensor)]
    return max(sizes, default=1)


class TestSpyreOpInfo(TestCase):
    @ops(op_list, allowed_dtypes=FLOATS)
    def test_samples_match_cpu(self, device, dtype, op):
        key = (op.name + ("." + op.variant_test_name if op.variant_test_name else ""),
               str(dtype).replace("torch.", ""))
        counts = SUMMARY[key]
        for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
            counts["samples"] += 1
            if sample.kwargs.get("dropout_p", 0.0):
                # the card draws from its own Philox generator, never the CPU's numbers:
                # dropout is checked by test_random.py (mask, scale, rate)
                counts["random, not compared"] += 1
                continue
            expected = run(op, upcast(sample, dtype))
            scale = reduction_length(sample) ** 0.5 if op.name in ACCUMULATING else 1.0
            try:
                with strict(True):
                    actual = run(op, to_device(sample, device))
                    torch.spyre.synchronize()
            except NotImplementedError as e:
                name = fallback_name(e)
                if name is None:
                    raise
                with strict(False):
                    actual = run(op, to_device(sample, device))
                check_close(actual, expected, dtype, scale)
                counts["fallback:" + name] += 1
                continue
            check_close(actual, expected, dtype, scale)
            counts["card"] += 1
        if key[0] in SKIPS:
            self.assertEqual(counts["card"], 0, f"{key[0]} runs on the card: drop its SKIPS entry")
            raise unittest.SkipTest(SKIPS[key[0]])
        self.assertGreater(counts["card"], 0,
                           f"{key}: no sample ran on the card ({dict(counts)})")


instantiate_device_type_tests(TestSpyreOpInfo, globals(), only_for=["spyre"])

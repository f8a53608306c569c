"""Weight-only int8 quantization of linear layers for inference (per output channel,
symmetric): ``quantize_int8_weights(model)`` swaps every ``nn.Linear`` (or those ``include``
accepts by name) for an ``Int8WeightOnlyLinear``, which keeps the weight as int8 with one scale
per output feature and computes ``(x @ q^T) * scales + bias`` with the custom op
``torch.ops.spyre.linear_int8_weight`` (fp32 sums, scales and bias, one rounding). On spyre that
is one ``spyre_op_linear_int8_weight`` program, the bias in its epilogue, which streams the weight
from DDR as int8 and converts it on the cores: half the bytes of fp16 weights, so a decode step's
linears (bound by streaming their weights) take about half the time (Documentation/ops.md
"Weight-only int8 linears"). The same modules run on the CPU (the op's reference computes the
same in fp32 there, and for fake tensors under torch.compile).
Documentation/torch_spyre.md "Weight-only int8".
"""

import torch
from torch import nn

__all__ = ["Int8WeightOnlyLinear", "quantize_int8_weights"]


class Int8WeightOnlyLinear(nn.Module):
    """``nn.Linear`` with an int8 weight ``[out, in]`` and ``scales [out]`` (the weight's dtype):
    weight ~= q * scales[:, None]. Inference only (the buffers carry no gradient)."""

    def __init__(self, in_features, out_features, bias=True, device=None,
                 dtype=torch.float32):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.int8,
                                                   device=device))
        self.register_buffer("scales", torch.ones(out_features, dtype=dtype, device=device))
        self.register_buffer("bias", torch.zeros(out_features, dtype=dtype, device=device)
                             if bias else None)

    @classmethod
    @torch.no_grad()
    def from_linear(cls, linear):
        """The quantized form of ``linear``, on its device: scale = max |row| / 127 (fp32), q =
        round(w / scale) (half to even), clamped to [-127, 127]; a zero row keeps scale 1."""
        w = linear.weight.detach()
        m = cls(linear.in_features, linear.out_features, linear.bias is not None, w.device,
                w.dtype)
        w32 = w.float()
        scale = w32.abs().amax(dim=1) / 127.0
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        m.weight.copy_((w32 / scale[:, None]).round().clamp(-127, 127).to(torch.int8))
        m.scales.copy_(scale.to(w.dtype))
        if linear.bias is not None:
            m.bias.copy_(linear.bias.detach())
        return m

    def forward(self, x):
        if x.dtype != self.scales.dtype:
            x = x.to(self.scales.dtype)
        return torch.ops.spyre.linear_int8_weight(x, self.weight, self.scales, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, weight=int8 per output channel")


def quantize_int8_weights(model, include=None):
    """Replaces (in place) every ``nn.Linear`` of ``model`` whose qualified name ``include(name)``
    accepts (default: all) by ``Int8WeightOnlyLinear.from_linear`` of it, on the linear's device;
    returns ``model``. Linears that share one weight (tied embeddings) each get their own copy."""
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is nn.Linear and (include is None or include(full)):
                setattr(module, child_name, Int8WeightOnlyLinear.from_linear(child))
    return model

"""Printing spyre tensors.

PyTorch formats a tensor with tensor operations (masked_select, isfinite, abs, ...). On a
spyre tensor each would run through the CPU fallback (with its warnings, and an error under
TORCH_SPYRE_STRICT=1), so the contents of a spyre tensor are formatted from one host copy, as
PyTorch itself does for XLA and lazy tensors; the suffixes (device='spyre:0', dtype, grad_fn)
still come from the spyre tensor.
"""

import torch
import torch._tensor_str as _tensor_str

_original_str = None


def _spyre_str(self, *, tensor_contents=None):
    if (
        tensor_contents is None
        and type(self) in (torch.Tensor, torch.nn.Parameter)
        and self.device.type == "spyre"
        and self.layout == torch.strided
    ):
        with torch.no_grad():
            host = self.detach().to("cpu")
        if host.numel() > 0:
            # Indented as _str_intern indents after its "tensor(" prefix.
            tensor_contents = _tensor_str._tensor_str(host, len("tensor("))
    return _original_str(self, tensor_contents=tensor_contents)


def install():
    global _original_str
    if _original_str is None:
        _original_str = _tensor_str._str
        _tensor_str._str = _spyre_str

"""The fused optimizer kernels (``torch.optim.Adam`` / ``AdamW`` / ``SGD`` / ``Adagrad`` with
``fused=True``) for spyre
tensors, composed of foreach ops that run on the card. torch offers ``fused=True`` on every
device that registers these ops; without them a fused step took the CPU fallback and moved
every parameter, gradient and moment to the host and back.

The math is the fused kernels' (aten/src/ATen/native/cuda/fused_adam_utils.cuh): with a
``grad_scale`` the gradients are unscaled in place (the kernel stores them back), ``maximize``
negates them, AdamW decays the parameters by ``lr * weight_decay`` (Adam adds
``weight_decay * param`` to the gradient), the moments are ``beta * m + (1 - beta) * g`` and
``beta2 * v + (1 - beta2) * g * g``, and ``param -= lr / (1 - beta1^step) * m / (sqrt(v) /
sqrt(1 - beta2^step) + eps)`` (``max(v)`` kept for amsgrad). ``state_steps`` are device tensors
already advanced by the optimizer (so are their powers of beta: computed on the card in fp32,
the CUDA kernel's bias corrections are in double). A ``found_inf`` that is set skips the whole
step, as the kernel does; it is read on the host (one element), as GradScaler's unfused path
reads it.
"""

import torch

_lib = None


def _gradients(params, grads, grad_scale, found_inf, maximize, weight_decay=0.0):
    """The fused kernels' common start: None when there is nothing to do (no parameters, or a
    set found_inf: the step is skipped); else the gradients to use: unscaled in place by
    grad_scale (the kernels store them back), negated for maximize, with L2 weight decay."""
    if not params or (found_inf is not None and bool(found_inf.item())):
        return None
    if grad_scale is not None:
        torch._foreach_div_(grads, grad_scale)
    g = torch._foreach_neg(grads) if maximize else list(grads)
    if weight_decay != 0:
        g = torch._foreach_add(g, params, alpha=weight_decay)
    return g


def _bias_corrections(beta, state_steps):
    """1 - beta^step per parameter, on the card."""
    bc = torch._foreach_pow(beta, state_steps)
    torch._foreach_neg_(bc)
    torch._foreach_add_(bc, 1.0)
    return bc


def _step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1,
          beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None,
          decoupled):
    g = _gradients(params, grads, grad_scale, found_inf, maximize,
                   0.0 if decoupled else weight_decay)
    if g is None:
        return
    if decoupled and weight_decay != 0:
        if isinstance(lr, torch.Tensor):
            torch._foreach_sub_(params, torch._foreach_mul(params, lr * weight_decay))
        else:
            torch._foreach_mul_(params, 1.0 - lr * weight_decay)
    torch._foreach_mul_(exp_avgs, beta1)
    torch._foreach_add_(exp_avgs, g, alpha=1.0 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, g, g, value=1.0 - beta2)
    bc1 = _bias_corrections(beta1, state_steps)
    bc2 = _bias_corrections(beta2, state_steps)
    torch._foreach_sqrt_(bc2)
    if amsgrad:
        torch._foreach_maximum_(max_exp_avg_sqs, exp_avg_sqs)
        denom = torch._foreach_sqrt(max_exp_avg_sqs)
    else:
        denom = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denom, bc2)
    torch._foreach_add_(denom, eps)
    # step = lr / bc1 * m / denom
    update = torch._foreach_div(exp_avgs, denom)
    torch._foreach_div_(update, bc1)
    torch._foreach_mul_(update, lr)
    torch._foreach_sub_(params, update)


def _sgd(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening,
         nesterov, maximize, is_first_step, grad_scale=None, found_inf=None):
    """The fused SGD kernel's math (fused_sgd_kernel.cu): the first step's buffer is the
    gradient itself, later ones momentum * buf + (1 - dampening) * g."""
    g = _gradients(params, grads, grad_scale, found_inf, maximize, weight_decay)
    if g is None:
        return
    if momentum != 0:
        if is_first_step:
            torch._foreach_copy_(momentum_buffer_list, g)
        else:
            torch._foreach_mul_(momentum_buffer_list, momentum)
            torch._foreach_add_(momentum_buffer_list, g, alpha=1.0 - dampening)
        g = (torch._foreach_add(g, momentum_buffer_list, alpha=momentum) if nesterov
             else momentum_buffer_list)
    torch._foreach_sub_(params, torch._foreach_mul(g, lr))


def _adagrad(params, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps,
             maximize, grad_scale=None, found_inf=None):
    """The fused Adagrad kernel's math (FusedAdagradKernel.cpp): state_sum += g * g, then
    param -= lr / (1 + (step - 1) * lr_decay) * g / (sqrt(state_sum) + eps)."""
    g = _gradients(params, grads, grad_scale, found_inf, maximize, weight_decay)
    if g is None:
        return
    torch._foreach_addcmul_(state_sums, g, g, value=1.0)
    std = torch._foreach_sqrt(state_sums)
    torch._foreach_add_(std, eps)
    clr = torch._foreach_sub(state_steps, 1.0)  # lr / (1 + (step - 1) * lr_decay)
    torch._foreach_mul_(clr, lr_decay)
    torch._foreach_add_(clr, 1.0)
    torch._foreach_reciprocal_(clr)
    torch._foreach_mul_(clr, lr)
    update = torch._foreach_div(g, std)
    torch._foreach_mul_(update, clr)
    torch._foreach_sub_(params, update)


def _adam(*args, **kwargs):
    _step(*args, decoupled=False, **kwargs)


def _adamw(*args, **kwargs):
    _step(*args, decoupled=True, **kwargs)


def install():
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    for name, fn in (("_fused_adam_", _adam), ("_fused_adamw_", _adamw), ("_fused_sgd_", _sgd)):
        _lib.impl(name, fn, "PrivateUse1")
        _lib.impl(f"{name}.tensor_lr", fn, "PrivateUse1")
    _lib.impl("_fused_adagrad_", _adagrad, "PrivateUse1")

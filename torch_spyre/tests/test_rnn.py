"""nn.LSTM, nn.GRU, nn.LSTMCell and nn.GRUCell on spyre against the CPU: outputs, final states
and every gradient (input, initial states, weights, biases), with and without biases, several
layers, bidirectional, under strict mode. torch runs a PrivateUse1 input through the fused cells
(_thnn_fused_lstm_cell / _thnn_fused_gru_cell and their backwards), which the CPU does not have:
before they were on the card, these modules failed on spyre."""

import pytest
import torch
import torch.nn as nn

from conftest import close


def pair(module, *args, **kw):
    torch.manual_seed(0)
    cpu = module(*args, **kw)
    dev = module(*args, **kw)
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev.to("spyre")


def check_grads(cpu, dev, tensors):
    for p, q in zip(cpu.parameters(), dev.parameters()):
        close(q.grad.cpu(), p.grad, torch.float32, scale=4)
    for t, u in tensors:
        close(u.grad.cpu(), t.grad, torch.float32, scale=4)


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_recurrent_layers(strict, cls, bias, bidirectional):
    cpu, dev = pair(cls, 12, 20, num_layers=2, batch_first=True, bias=bias,
                    bidirectional=bidirectional)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 12, generator=g).requires_grad_()
    dirs = 2 if bidirectional else 1
    h0 = torch.randn(2 * dirs, 3, 20, generator=g).requires_grad_()
    xs, hs = x.detach().to("spyre").requires_grad_(), h0.detach().to("spyre").requires_grad_()
    if cls is nn.LSTM:
        c0 = torch.randn(2 * dirs, 3, 20, generator=g).requires_grad_()
        cs = c0.detach().to("spyre").requires_grad_()
        y, (h, c) = cpu(x, (h0, c0))
        ys, (hd, cd) = dev(xs, (hs, cs))
        close(cd.cpu(), c.detach(), torch.float32)
        extra = [(c0, cs)]
        loss, loss_s = y.sum() + (h * c).sum(), ys.sum() + (hd * cd).sum()
    else:
        y, h = cpu(x, h0)
        ys, hd = dev(xs, hs)
        extra = []
        loss, loss_s = y.sum() + (h * h).sum(), ys.sum() + (hd * hd).sum()
    close(ys.cpu(), y.detach(), torch.float32)
    close(hd.cpu(), h.detach(), torch.float32)
    loss.backward()
    loss_s.backward()
    check_grads(cpu, dev, [(x, xs), (h0, hs)] + extra)


@pytest.mark.parametrize("cls", [nn.LSTMCell, nn.GRUCell])
def test_cells_and_a_cell_state_without_gradient(strict, cls):
    cpu, dev = pair(cls, 8, 16)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 8, generator=g).requires_grad_()
    xs = x.detach().to("spyre").requires_grad_()
    out, out_s = cpu(x), dev(xs)
    if cls is nn.LSTMCell:
        # only hy used: the cell state's gradient is undefined in the fused backward
        out, out_s = out[0], out_s[0]
    close(out_s.cpu(), out.detach(), torch.float32)
    out.pow(2).sum().backward()
    out_s.pow(2).sum().backward()
    check_grads(cpu, dev, [(x, xs)])


def test_lstm_in_bfloat16(strict):
    cpu, dev = pair(nn.LSTM, 16, 32, batch_first=True)
    dev = dev.to(torch.bfloat16)
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(3))
    y, _ = cpu(x.bfloat16().float())
    ys, _ = dev(x.to("spyre", torch.bfloat16))
    close(ys.cpu(), y.detach().bfloat16(), torch.bfloat16, scale=2)

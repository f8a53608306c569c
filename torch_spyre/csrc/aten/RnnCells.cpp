// The fused LSTM and GRU cells torch's RNN code calls for a PrivateUse1 input (as for CUDA:
// aten/src/ATen/native/RNN.cpp picks _thnn_fused_lstm_cell / _thnn_fused_gru_cell when the
// input is not on the CPU, and the CPU has no kernel for them, so nn.LSTM / nn.GRU / LSTMCell /
// GRUCell failed on spyre even through the fallback). Composed of the card's elementwise
// kernels; the forward saves a workspace for its backward, laid out as CUDA's:
//   LSTM: [B, 4H] = the activated gates i, f, g, o (sigmoid, sigmoid, tanh, sigmoid);
//   GRU:  [B, 5H] = r, z, n, hx and the hidden gate's new part h_n (+ its bias).
// The gates come in torch's order (LSTM i, f, g, o; GRU r, z, n); the biases are optional.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <tuple>

namespace torch_spyre::aten {
namespace {

at::Tensor gates_of(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                    const std::optional<at::Tensor>& input_bias,
                    const std::optional<at::Tensor>& hidden_bias) {
    at::Tensor g = input_gates.add(hidden_gates);
    if (input_bias && input_bias->defined()) g.add_(*input_bias);
    if (hidden_bias && hidden_bias->defined()) g.add_(*hidden_bias);
    return g;
}

at::Tensor one_minus(const at::Tensor& t) { return at::rsub(t, 1); }

// The gradient of an output autograd did not need: zeros of the output's shape.
at::Tensor or_zeros(const at::Tensor& grad, const at::Tensor& like) {
    return grad.defined() ? grad : at::zeros_like(like);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
    c10::DeviceGuard guard(input_gates.device());
    const auto chunks = gates_of(input_gates, hidden_gates, input_bias, hidden_bias).chunk(4, 1);
    const at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid(), g = chunks[2].tanh(),
                     o = chunks[3].sigmoid();
    const at::Tensor cy = f.mul(cx).add_(i.mul(g));
    const at::Tensor hy = o.mul(cy.tanh());
    return {hy, cy, at::cat({i, f, g, o}, 1)};
}

// d(hy, cy)/d(gates, cx) with the activated gates from the workspace: hy = o tanh(cy),
// cy = f cx + i g.
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy_in, const std::optional<at::Tensor>& grad_cy_in,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
    c10::DeviceGuard guard(cx.device());
    const at::Tensor grad_hy = or_zeros(grad_hy_in.value_or(at::Tensor()), cy);
    const at::Tensor grad_cy = or_zeros(grad_cy_in.value_or(at::Tensor()), cy);
    const auto w = workspace.chunk(4, 1);
    const at::Tensor &i = w[0], &f = w[1], &g = w[2], &o = w[3];
    const at::Tensor tanh_cy = cy.tanh();
    // the cell state's gradient: through hy, plus the one from later steps
    const at::Tensor gcy = grad_hy.mul(o).mul_(one_minus(tanh_cy.square())).add_(grad_cy);
    const at::Tensor gi = gcy.mul(g).mul_(i).mul_(one_minus(i));
    const at::Tensor gf = gcy.mul(cx).mul_(f).mul_(one_minus(f));
    const at::Tensor gg = gcy.mul(i).mul_(one_minus(g.square()));
    const at::Tensor go = grad_hy.mul(tanh_cy).mul_(o).mul_(one_minus(o));
    const at::Tensor grad_gates = at::cat({gi, gf, gg, go}, 1);
    const at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
    return {grad_gates, gcy.mul(f), grad_bias};
}

// r = sigmoid(i_r + h_r), z = sigmoid(i_z + h_z), n = tanh(i_n + r h_n), hy = n + z (hx - n),
// each part with its biases (h_n's bias inside the product, as torch).
std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates,
                                            const at::Tensor& hidden_gates, const at::Tensor& hx,
                                            const std::optional<at::Tensor>& input_bias,
                                            const std::optional<at::Tensor>& hidden_bias) {
    c10::DeviceGuard guard(input_gates.device());
    auto ig = input_gates, hg = hidden_gates;
    if (input_bias && input_bias->defined()) ig = ig.add(*input_bias);
    if (hidden_bias && hidden_bias->defined()) hg = hg.add(*hidden_bias);
    const auto in = ig.chunk(3, 1), hn = hg.chunk(3, 1);
    const at::Tensor r = in[0].add(hn[0]).sigmoid_(), z = in[1].add(hn[1]).sigmoid_();
    const at::Tensor n = in[2].add(r.mul(hn[2])).tanh_();
    const at::Tensor hy = n.add(z.mul(hx.sub(n)));
    return {hy, at::cat({r, z, n, hx, hn[2]}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
    c10::DeviceGuard guard(grad_hy.device());
    const auto w = workspace.chunk(5, 1);
    const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
    const at::Tensor grad_hx = grad_hy.mul(z);
    // pre-activation gradients of n, z and r
    const at::Tensor dn = grad_hy.mul(one_minus(z)).mul_(one_minus(n.square()));
    const at::Tensor dz = grad_hy.mul(hx.sub(n)).mul_(z).mul_(one_minus(z));
    const at::Tensor dr = dn.mul(hn).mul_(r).mul_(one_minus(r));
    const at::Tensor grad_input_gates = at::cat({dr, dz, dn}, 1);
    const at::Tensor grad_hidden_gates = at::cat({dr, dz, dn.mul(r)}, 1);
    at::Tensor grad_input_bias, grad_hidden_bias;
    if (has_bias) {
        grad_input_bias = grad_input_gates.sum(0);
        grad_hidden_bias = grad_hidden_gates.sum(0);
    }
    return {grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_thnn_fused_lstm_cell", TORCH_FN(lstm_cell));
    m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lstm_cell_backward));
    m.impl("_thnn_fused_gru_cell", TORCH_FN(gru_cell));
    m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(gru_cell_backward));
}

}  // namespace torch_spyre::aten

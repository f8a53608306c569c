// The "spyre" torch.distributed backend (ProcessGroupSpyre.h). Each collective checks what it
// can on the caller's thread and queues the rest on the group's worker (CollectiveQueue.h),
// where libspyre's calls block until the exchange is done; the caller gets a Work that completes
// when the collective's device work has finished (SpyreWork.h). Errors of libspyre's
// communicator are DistBackendErrors: they fail the group (CollectiveQueue.h).
#include "distributed/ProcessGroupSpyre.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "aten/OpLibrary.h"
#include "distributed/CollectiveQueue.h"
#include "runtime/SpyreAllocator.h"
#include "runtime/SpyreFunctions.h"
#include "runtime/SpyreStream.h"

namespace torch_spyre {
namespace {

// A failed libspyre call: the communicator's error (CollectiveQueue.h fails the group on it).
void check(spyre_status s, const char* what) {
    if (s != SPYRE_SUCCESS)
        C10_THROW_ERROR(DistBackendError,
                        std::string("spyre backend: ") + what + " failed: " + spyre_last_error());
}

spyre_dtype dtype_of(const at::Tensor& t) {
    TORCH_CHECK(aten::is_float(t.scalar_type()),
                "spyre backend: collectives take float32, float16 or bfloat16 tensors, not ",
                t.scalar_type());
    return *aten::op_dtype(t.scalar_type());
}

spyre_reduce_op op_of(const c10d::ReduceOp& op) {
    switch (op.op_) {
        case c10d::ReduceOp::SUM:
            return SPYRE_REDUCE_SUM;
        case c10d::ReduceOp::AVG:
            return SPYRE_REDUCE_MEAN;
        case c10d::ReduceOp::MAX:
            return SPYRE_REDUCE_MAX;
        case c10d::ReduceOp::MIN:
            return SPYRE_REDUCE_MIN;
        default:
            TORCH_CHECK(false, "spyre backend: reduce op ", op.op_,
                        " is not supported "
                        "(SUM, AVG, MAX, MIN are)");
    }
}

// A dense spyre tensor as a libspyre buffer range.
DevicePtr range_of(const at::Tensor& t, const char* what) {
    TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "spyre backend: ", what,
                " must be a spyre tensor, got ", t.device());
    TORCH_CHECK(t.is_contiguous(), "spyre backend: ", what, " must be contiguous");
    return lookup(t.data_ptr());
}

spyre_stream_t stream_of(const at::Tensor& t) {
    return native_stream(current_stream(t.device().index()));
}

c10::DeviceIndex card_of(const at::Tensor& t) {
    TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1,
                "spyre backend: collectives take spyre tensors, got ", t.device());
    return t.device().index();
}

}  // namespace

ProcessGroupSpyre::ProcessGroupSpyre(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size, std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size),
      timeout_(timeout),
      group_(std::make_shared<Group>(store, rank, size, timeout)),
      queue_(std::make_unique<CollectiveQueue>(rank, timeout, [w = std::weak_ptr<Group>(group_)] {
          if (auto g = w.lock()) g->abort();
      })) {}

// Bounded with collectives in flight: they get min(timeout, 10 s) to finish, then the
// communicator is aborted (CollectiveQueue::shutdown). A worker still stuck after that holds
// the Group (and its communicator) through its collective's lambda: the last owner destroys it.
ProcessGroupSpyre::~ProcessGroupSpyre() {
    queue_->shutdown(
        std::min<std::chrono::milliseconds>(timeout_, std::chrono::milliseconds(10000)));
}

ProcessGroupSpyre::Group::Group(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), store_(std::move(store)), timeout_(timeout) {}

ProcessGroupSpyre::Group::~Group() {
    if (spyre_comm_t comm = comm_.load()) spyre_comm_destroy(comm);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::submit(c10d::OpType type, c10::DeviceIndex device,
                                                         std::vector<at::Tensor> outputs,
                                                         std::vector<at::Tensor> inputs,
                                                         std::function<void()> run) {
    return queue_->submit(type, device, std::move(outputs), std::move(inputs), std::move(run));
}

spyre_comm_t ProcessGroupSpyre::Group::comm_for(c10::DeviceIndex device) {
    std::lock_guard lock(mu_);
    if (spyre_comm_t comm = comm_.load()) {
        TORCH_CHECK(device == device_,
                    "spyre backend: one card per process: this process group "
                    "uses spyre:",
                    device_.load(), ", got a tensor on spyre:", device);
        return comm;
    }
    spyre_comm_unique_id id{};
    const std::string key = "spyre_comm_unique_id";
    if (rank_ == 0) {
        check(spyre_comm_get_unique_id(&id), "spyre_comm_get_unique_id");
        store_->set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof id.internal));
    } else {
        const std::vector<uint8_t> v = store_->get(key);
        TORCH_CHECK(v.size() == sizeof id.internal, "spyre backend: bad unique id in the store");
        std::memcpy(id.internal, v.data(), v.size());
    }
    spyre_comm_t comm = nullptr;
    check(spyre_comm_init_rank(&comm, size_, &id, rank_, device_handle(device)),
          "spyre_comm_init_rank");
    comm_ = comm;
    check(
        spyre_comm_set_timeout(comm, static_cast<uint64_t>(std::max<int64_t>(1, timeout_.count()))),
        "spyre_comm_set_timeout");
    device_ = device;
    return comm;
}

// Without mu_: the worker may hold it in spyre_comm_init_rank.
void ProcessGroupSpyre::Group::abort() {
    if (spyre_comm_t comm = comm_.load()) spyre_comm_abort(comm);
}

void ProcessGroupSpyre::abort() { group_->abort(); }

std::string ProcessGroupSpyre::transport() {
    std::lock_guard lock(group_->mu_);
    spyre_comm_info info{};
    spyre_comm_t comm = group_->comm_.load();
    if (!comm) return "";
    check(spyre_comm_get_info(comm, &info), "spyre_comm_get_info");
    return info.transport;
}

bool ProcessGroupSpyre::device_waits() {
    std::lock_guard lock(group_->mu_);
    spyre_comm_info info{};
    spyre_comm_t comm = group_->comm_.load();
    if (!comm) return false;
    check(spyre_comm_get_info(comm, &info), "spyre_comm_get_info");
    return info.flags & SPYRE_COMM_INFO_DEVICE_WAITS;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
    TORCH_CHECK(tensors.size() == 1, "spyre backend: one tensor per process");
    return submit(
        c10d::OpType::ALLREDUCE, card_of(tensors[0]), tensors, {},
        [g = group_, t = tensors[0], op = opts.reduceOp]() mutable { g->run_allreduce(t, op); });
}

void ProcessGroupSpyre::Group::run_allreduce(at::Tensor& t, const c10d::ReduceOp& op) {
    if (!aten::is_float(t.scalar_type()))
        allreduce_integers(t, op);
    else
        allreduce_float(t, op);
}

void ProcessGroupSpyre::Group::allreduce_float(at::Tensor& t, const c10d::ReduceOp& op) {
    const DevicePtr p = range_of(t, "the tensor");
    spyre_comm_t comm = comm_for(t.device().index());
    check(spyre_comm_all_reduce(p.buffer, p.offset, p.buffer, p.offset, t.numel(), dtype_of(t),
                                op_of(op), comm, stream_of(t)),
          "all_reduce");
}

// The cores reduce floats only: integers (and bools: SUM/MAX is any, MIN all) are reduced as
// float32 on the card, which is exact while every partial sum stays within 2^24; larger values
// are an error on every rank (the largest magnitude is agreed first), not a rounded result.
// DDP's find_unused_parameters reduces an int32 map this way.
void ProcessGroupSpyre::Group::allreduce_integers(at::Tensor& t, const c10d::ReduceOp& op) {
    TORCH_CHECK(at::isIntegralType(t.scalar_type(), /*includeBool=*/true),
                "spyre backend: all_reduce takes float or integer tensors, not ", t.scalar_type());
    TORCH_CHECK(op.op_ == c10d::ReduceOp::SUM || op.op_ == c10d::ReduceOp::MAX ||
                    op.op_ == c10d::ReduceOp::MIN,
                "spyre backend: all_reduce of ", t.scalar_type(), " tensors takes SUM, MAX or MIN");
    if (t.numel() == 0) return;
    at::Tensor f = t.to(at::kFloat).contiguous();
    at::Tensor largest = f.abs().max().reshape({1});
    allreduce_float(largest, c10d::ReduceOp::MAX);
    const double exact = 16777216.0 / (op.op_ == c10d::ReduceOp::SUM ? size_ : 1);
    const double seen = largest.item<double>();
    TORCH_CHECK(seen <= exact, "spyre backend: all_reduce of ", t.scalar_type(),
                " runs in float32 on the card, exact for |values| up to ", exact,
                " (2^24 / ranks for SUM); got ", seen);
    allreduce_float(f, op);
    // through int64: a sum past a narrow type's range wraps as the integer sum would
    t.copy_(t.scalar_type() == at::kBool ? f : f.to(at::kLong));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
    TORCH_CHECK(!tensors.empty(), "spyre backend: allreduce_coalesced of no tensors");
    std::vector<at::Tensor> flat;
    for (const at::Tensor& t : tensors) {
        TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                    "spyre backend: allreduce_coalesced takes tensors of one dtype");
        flat.push_back(t.reshape(-1));
    }
    return submit(c10d::OpType::ALLREDUCE_COALESCED, card_of(tensors[0]), tensors, {},
                  [g = group_, tensors, flat, op = opts.reduceOp]() mutable {
                      at::Tensor all = at::cat(flat);
                      g->run_allreduce(all, op);
                      int64_t at = 0;
                      for (at::Tensor& t : tensors) {
                          t.copy_(all.narrow(0, at, t.numel()).view(t.sizes()));
                          at += t.numel();
                      }
                  });
}

namespace {

// broadcast and all_gather only move bytes: a tensor of any dtype goes through them as 4- or
// 2-byte words (libspyre takes float dtypes only); a 1-byte dtype of odd length through a copy
// padded by one byte.
struct Words {
    spyre_dtype dtype;
    uint64_t count;
};

std::optional<Words> words_of(const at::Tensor& t) {
    const uint64_t bytes = t.nbytes();
    if (bytes % 4 == 0) return Words{SPYRE_DTYPE_FLOAT32, bytes / 4};
    if (bytes % 2 == 0) return Words{SPYRE_DTYPE_FLOAT16, bytes / 2};
    return std::nullopt;
}

// t's bytes as a flat byte tensor (a view; t contiguous).
at::Tensor bytes_of(const at::Tensor& t) { return t.view({-1}).view(at::kByte); }

// t copied into a byte tensor one byte longer (an even length).
at::Tensor padded(const at::Tensor& t) {
    at::Tensor p = at::zeros({static_cast<int64_t>(t.nbytes()) + 1}, t.options().dtype(at::kByte));
    p.narrow(0, 0, t.numel()).copy_(bytes_of(t));
    return p;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
    TORCH_CHECK(tensors.size() == 1, "spyre backend: one tensor per process");
    range_of(tensors[0], "the tensor");
    return submit(c10d::OpType::BROADCAST, card_of(tensors[0]), tensors, {},
                  [g = group_, t = tensors[0], root = static_cast<int>(opts.rootRank)] {
                      g->run_broadcast(t, root);
                  });
}

void ProcessGroupSpyre::Group::run_broadcast(const at::Tensor& t, int root) {
    const std::optional<Words> w = words_of(t);
    at::Tensor moved = w ? t : padded(t);
    const Words mw = w ? *w : *words_of(moved);
    const DevicePtr p = range_of(moved, "the tensor");
    spyre_comm_t comm = comm_for(t.device().index());
    check(spyre_comm_broadcast(p.buffer, p.offset, p.buffer, p.offset, mw.count, mw.dtype, root,
                               comm, stream_of(t)),
          "broadcast");
    if (!w) bytes_of(t).copy_(moved.narrow(0, 0, t.numel()));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::_allgather_base(at::Tensor& output,
                                                                  at::Tensor& input,
                                                                  const c10d::AllgatherOptions&) {
    TORCH_CHECK(output.numel() == input.numel() * size_ && output.dtype() == input.dtype(),
                "spyre backend: all_gather_into_tensor needs an output of world_size x the "
                "input's elements and the input's dtype");
    range_of(input, "the input");
    range_of(output, "the output");
    return submit(c10d::OpType::_ALLGATHER_BASE, card_of(input), {output}, {input},
                  [g = group_, output, input]() mutable { g->run_allgather_base(output, input); });
}

void ProcessGroupSpyre::Group::run_allgather_base(at::Tensor& output, at::Tensor& input) {
    const std::optional<Words> w = words_of(input);
    at::Tensor in = w ? input : padded(input);
    const Words iw = w ? *w : *words_of(in);
    at::Tensor out = w ? output : at::empty({size_ * in.numel()}, in.options());
    const DevicePtr ip = range_of(in, "the input"), op = range_of(out, "the output");
    spyre_comm_t comm = comm_for(input.device().index());
    check(spyre_comm_all_gather(ip.buffer, ip.offset, op.buffer, op.offset, iw.count, iw.dtype,
                                comm, stream_of(input)),
          "all_gather");
    if (!w)
        bytes_of(output)
            .view({size_, input.numel()})
            .copy_(out.view({size_, in.numel()}).narrow(1, 0, input.numel()));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
    TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1 &&
                    outputs[0].size() == static_cast<size_t>(size_),
                "spyre backend: all_gather takes one input and world_size outputs");
    range_of(inputs[0], "the input");
    return submit(
        c10d::OpType::ALLGATHER, card_of(inputs[0]), outputs[0], inputs,
        [g = group_, outs = outputs[0], in = inputs[0]]() mutable {
            at::Tensor input = in.contiguous();
            at::Tensor flat = at::empty({g->size_ * input.numel()}, input.options());
            g->run_allgather_base(flat, input);
            for (int r = 0; r < g->size_; ++r)
                outs[r].copy_(flat.narrow(0, r * input.numel(), input.numel()).view_as(input));
        });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
    TORCH_CHECK(input.numel() == output.numel() * size_ && output.dtype() == input.dtype(),
                "spyre backend: reduce_scatter_tensor needs an input of world_size x the "
                "output's elements and the output's dtype");
    range_of(input, "the input");
    range_of(output, "the output");
    dtype_of(input);
    op_of(opts.reduceOp);
    return submit(c10d::OpType::_REDUCE_SCATTER_BASE, card_of(input), {output}, {input},
                  [g = group_, output, input, op = opts.reduceOp]() mutable {
                      g->run_reduce_scatter_base(output, input, op);
                  });
}

void ProcessGroupSpyre::Group::run_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                       const c10d::ReduceOp& op) {
    const DevicePtr in = range_of(input, "the input"), out = range_of(output, "the output");
    spyre_comm_t comm = comm_for(input.device().index());
    check(spyre_comm_reduce_scatter(in.buffer, in.offset, out.buffer, out.offset, output.numel(),
                                    dtype_of(input), op_of(op), comm, stream_of(input)),
          "reduce_scatter");
}

// Floats reduce on the cards to root (recv written on root only); integers as all_reduce does
// (every rank gets the result, which c10d allows: non-root tensors are unspecified after it).
c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
    TORCH_CHECK(outputs.size() == inputs.size(),
                "spyre backend: allgather_into_tensor_coalesced: ", outputs.size(), " outputs for ",
                inputs.size(), " inputs");
    for (size_t i = 0; i < inputs.size(); ++i) {
        TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * size_ &&
                        outputs[i].dtype() == inputs[i].dtype(),
                    "spyre backend: all_gather_into_tensor needs an output of world_size x the "
                    "input's elements and the input's dtype");
        range_of(inputs[i], "the input");
        range_of(outputs[i], "the output");
    }
    if (inputs.empty())
        return submit(c10d::OpType::COALESCED,
                      group_->device() >= 0 ? group_->device() : current_device(), {}, {}, [] {});
    return submit(c10d::OpType::COALESCED, card_of(inputs[0]), outputs, inputs,
                  [g = group_, outputs, inputs]() mutable {
                      for (size_t i = 0; i < inputs.size(); ++i)
                          g->run_allgather_base(outputs[i], inputs[i]);
                  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
    TORCH_CHECK(outputs.size() == inputs.size(),
                "spyre backend: reduce_scatter_tensor_coalesced: ", outputs.size(), " outputs for ",
                inputs.size(), " inputs");
    for (size_t i = 0; i < inputs.size(); ++i) {
        TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * size_ &&
                        outputs[i].dtype() == inputs[i].dtype(),
                    "spyre backend: reduce_scatter_tensor needs an input of world_size x the "
                    "output's elements and the output's dtype");
        range_of(inputs[i], "the input");
        range_of(outputs[i], "the output");
        dtype_of(inputs[i]);
    }
    op_of(opts.reduceOp);
    if (inputs.empty())
        return submit(c10d::OpType::COALESCED,
                      group_->device() >= 0 ? group_->device() : current_device(), {}, {}, [] {});
    return submit(c10d::OpType::COALESCED, card_of(inputs[0]), outputs, inputs,
                  [g = group_, outputs, inputs, op = opts.reduceOp]() mutable {
                      for (size_t i = 0; i < inputs.size(); ++i)
                          g->run_reduce_scatter_base(outputs[i], inputs[i], op);
                  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
    TORCH_CHECK(tensors.size() == 1, "spyre backend: one tensor per process");
    const int root = static_cast<int>(opts.rootRank);
    return submit(c10d::OpType::REDUCE, card_of(tensors[0]), tensors, {},
                  [g = group_, t = tensors[0], op = opts.reduceOp, root]() mutable {
                      if (!aten::is_float(t.scalar_type())) {
                          g->allreduce_integers(t, op);
                          return;
                      }
                      const DevicePtr p = range_of(t, "the tensor");
                      spyre_comm_t comm = g->comm_for(t.device().index());
                      check(spyre_comm_reduce(
                                p.buffer, p.offset, g->rank_ == root ? p.buffer : nullptr, p.offset,
                                t.numel(), dtype_of(t), op_of(op), root, comm, stream_of(t)),
                            "reduce");
                  });
}

void ProcessGroupSpyre::Group::send_bytes(const at::Tensor& t, int peer) {
    const DevicePtr p = range_of(t, "the tensor");
    spyre_comm_t comm = comm_for(t.device().index());
    check(spyre_comm_send(p.buffer, p.offset, t.nbytes(), SPYRE_DTYPE_UINT8, peer, comm,
                          stream_of(t)),
          "send");
}

void ProcessGroupSpyre::Group::recv_bytes(at::Tensor& t, int peer) {
    const DevicePtr p = range_of(t, "the tensor");
    spyre_comm_t comm = comm_for(t.device().index());
    check(spyre_comm_recv(p.buffer, p.offset, t.nbytes(), SPYRE_DTYPE_UINT8, peer, comm,
                          stream_of(t)),
          "recv");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::send(std::vector<at::Tensor>& tensors,
                                                       int dst_rank, int) {
    TORCH_CHECK(tensors.size() == 1, "spyre backend: one tensor per process");
    range_of(tensors[0], "the tensor");
    return submit(c10d::OpType::SEND, card_of(tensors[0]), {}, tensors,
                  [g = group_, t = tensors[0], dst_rank] { g->send_bytes(t, dst_rank); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::recv(std::vector<at::Tensor>& tensors,
                                                       int src_rank, int) {
    TORCH_CHECK(tensors.size() == 1, "spyre backend: one tensor per process");
    range_of(tensors[0], "the tensor");
    return submit(c10d::OpType::RECV, card_of(tensors[0]), tensors, {},
                  [g = group_, t = tensors[0], src_rank]() mutable { g->recv_bytes(t, src_rank); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::recvAnysource(std::vector<at::Tensor>&, int) {
    TORCH_CHECK(false,
                "spyre backend: recv from any source is not supported (libspyre matches "
                "send and recv per rank pair): pass src");
}

void ProcessGroupSpyre::Group::exchange(const std::vector<at::Tensor>& sends,
                                        const std::vector<at::Tensor>& recvs) {
    const at::Tensor& any = sends[rank_];
    spyre_comm_t comm = comm_for(any.device().index());
    spyre_comm_info info{};
    check(spyre_comm_get_info(comm, &info), "all_to_all");
    const int64_t piece = static_cast<int64_t>(std::max<uint64_t>(info.chunk_bytes, 1));
    if (recvs[rank_].numel()) recvs[rank_].copy_(sends[rank_]);
    for (int k = 1; k < size_; ++k) {
        const int to = (rank_ + k) % size_, from = (rank_ - k + size_) % size_;
        const at::Tensor &out = sends[to], &in = recvs[from];
        for (int64_t sent = 0, got = 0; sent < out.numel() || got < in.numel();) {
            if (sent < out.numel()) {
                const int64_t n = std::min(piece, out.numel() - sent);
                send_bytes(out.narrow(0, sent, n), to);
                sent += n;
            }
            if (got < in.numel()) {
                const int64_t n = std::min(piece, in.numel() - got);
                at::Tensor part = in.narrow(0, got, n);
                recv_bytes(part, from);
                got += n;
            }
        }
    }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions&) {
    TORCH_CHECK(output.device() == input.device() && output.scalar_type() == input.scalar_type(),
                "spyre backend: all_to_all_single: input and output must be on one card and of "
                "one dtype");
    TORCH_CHECK(input.dim() >= 1 && output.dim() >= 1,
                "spyre backend: all_to_all_single splits dim 0; got a 0-dim tensor");
    const auto splits = [&](const at::Tensor& t, std::vector<int64_t>& sizes, const char* what) {
        if (sizes.empty()) {
            TORCH_CHECK(t.size(0) % size_ == 0, "spyre backend: all_to_all_single: the ", what,
                        "'s dim 0 (", t.size(0), ") does not split into ", size_,
                        " equal blocks; pass split sizes");
            return std::vector<int64_t>(size_, t.size(0) / size_);
        }
        TORCH_CHECK(static_cast<int64_t>(sizes.size()) == size_, "spyre backend: ", what,
                    " split sizes: ", sizes.size(), " for ", size_, " ranks");
        int64_t total = 0;
        for (int64_t n : sizes) {
            TORCH_CHECK(n >= 0, "spyre backend: negative ", what, " split size ", n);
            total += n;
        }
        TORCH_CHECK(total == t.size(0), "spyre backend: the ", what, " split sizes add up to ",
                    total, ", its dim 0 is ", t.size(0));
        return sizes;
    };
    const std::vector<int64_t> outs = splits(output, output_split_sizes, "output"),
                               ins = splits(input, input_split_sizes, "input");
    return submit(c10d::OpType::ALLTOALL_BASE, card_of(input), {output}, {input},
                  [g = group_, output, input, outs, ins]() mutable {
                      const at::Tensor in = input.contiguous();
                      at::Tensor out = output.is_contiguous()
                                           ? output
                                           : at::empty_like(output, at::MemoryFormat::Contiguous);
                      const int64_t in_row =
                          input.dim() ? in.numel() / std::max<int64_t>(in.size(0), 1) : 1;
                      const int64_t out_row =
                          output.dim() ? out.numel() / std::max<int64_t>(out.size(0), 1) : 1;
                      TORCH_CHECK(in_row == out_row, "spyre backend: all_to_all_single: rows of ",
                                  in_row, " and ", out_row, " elements");
                      const at::Tensor in_bytes = bytes_of(in), out_bytes = bytes_of(out);
                      const int64_t row_bytes = in_row * in.element_size();
                      std::vector<at::Tensor> sends, recvs;
                      for (int r = 0, a = 0, b = 0; r < g->size_; a += ins[r], b += outs[r], ++r) {
                          sends.push_back(in_bytes.narrow(0, a * row_bytes, ins[r] * row_bytes));
                          recvs.push_back(out_bytes.narrow(0, b * row_bytes, outs[r] * row_bytes));
                      }
                      g->exchange(sends, recvs);
                      if (!out.is_same(output)) output.copy_(out);
                  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions&) {
    TORCH_CHECK(static_cast<int64_t>(outputs.size()) == size_ &&
                    static_cast<int64_t>(inputs.size()) == size_,
                "spyre backend: all_to_all takes one input and one output tensor per rank");
    for (int r = 0; r < size_; ++r) {
        TORCH_CHECK(
            inputs[r].device() == inputs[0].device() && outputs[r].device() == inputs[0].device(),
            "spyre backend: all_to_all's tensors must be on one card");
        TORCH_CHECK(r != rank_ || inputs[r].nbytes() == outputs[r].nbytes(),
                    "spyre backend: all_to_all: this rank's own input and output differ in size");
    }
    return submit(
        c10d::OpType::ALLTOALL, card_of(inputs[0]), outputs, inputs,
        [g = group_, outputs, inputs]() mutable {
            std::vector<at::Tensor> ins, outs, sends, recvs;
            for (int r = 0; r < g->size_; ++r) {
                ins.push_back(inputs[r].contiguous());
                outs.push_back(outputs[r].is_contiguous()
                                   ? outputs[r]
                                   : at::empty_like(outputs[r], at::MemoryFormat::Contiguous));
                sends.push_back(bytes_of(ins[r]));
                recvs.push_back(bytes_of(outs[r]));
            }
            g->exchange(sends, recvs);
            for (int r = 0; r < g->size_; ++r)
                if (!outs[r].is_same(outputs[r])) outputs[r].copy_(outs[r]);
        });
}

// gather and scatter: root receives / sends each rank's tensor in rank order (send/recv).
c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
    TORCH_CHECK(inputs.size() == 1, "spyre backend: one tensor per process");
    const int root = static_cast<int>(opts.rootRank);
    const at::Tensor& in = inputs[0];
    if (rank_ != root) {
        TORCH_CHECK(outputs.empty() || outputs[0].empty(),
                    "spyre backend: gather takes output tensors on the root only");
        return submit(c10d::OpType::GATHER, card_of(in), {}, inputs,
                      [g = group_, in, root] { g->send_bytes(in.contiguous(), root); });
    }
    TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(size_),
                "spyre backend: gather takes world_size output tensors on the root");
    for (const at::Tensor& out : outputs[0])
        TORCH_CHECK(out.numel() == in.numel() && out.dtype() == in.dtype(),
                    "spyre backend: gather's outputs must match the input's size and dtype");
    return submit(c10d::OpType::GATHER, card_of(in), outputs[0], inputs,
                  [g = group_, outs = outputs[0], input = in, root]() mutable {
                      const at::Tensor in = input.contiguous();
                      for (int r = 0; r < g->size_; ++r) {
                          at::Tensor& out = outs[r];
                          at::Tensor dst = out.is_contiguous() ? out : at::empty_like(in);
                          if (r == root)
                              dst.copy_(in);
                          else
                              g->recv_bytes(dst, r);
                          if (!dst.is_same(out)) out.copy_(dst);
                      }
                  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
    TORCH_CHECK(outputs.size() == 1, "spyre backend: one tensor per process");
    const int root = static_cast<int>(opts.rootRank);
    const at::Tensor& out = outputs[0];
    if (rank_ != root) {
        TORCH_CHECK(inputs.empty() || inputs[0].empty(),
                    "spyre backend: scatter takes input tensors on the root only");
    } else {
        TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_),
                    "spyre backend: scatter takes world_size input tensors on the root");
        for (const at::Tensor& in : inputs[0])
            TORCH_CHECK(in.numel() == out.numel() && in.dtype() == out.dtype(),
                        "spyre backend: scatter's inputs must match the output's size and dtype");
    }
    std::vector<at::Tensor> ins = rank_ == root ? inputs[0] : std::vector<at::Tensor>{};
    return submit(
        c10d::OpType::SCATTER, card_of(out), outputs, ins, [g = group_, out, ins, root]() mutable {
            at::Tensor dst = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
            if (g->rank_ != root) {
                g->recv_bytes(dst, root);
            } else {
                for (int r = 0; r < g->size_; ++r) {
                    const at::Tensor in = ins[r].contiguous();
                    if (r == root)
                        dst.copy_(in);
                    else
                        g->send_bytes(in, r);
                }
            }
            if (!dst.is_same(out)) out.copy_(dst);
        });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::barrier(const c10d::BarrierOptions& opts) {
    c10::DeviceIndex d = group_->device();
    if (d < 0) d = opts.device_ids.empty() ? current_device() : opts.device_ids[0];
    return submit(c10d::OpType::BARRIER, d, {}, {}, [g = group_, d] {
        check(spyre_comm_barrier(g->comm_for(d), native_stream(current_stream(d))), "barrier");
    });
}

}  // namespace torch_spyre

// torch registers c10d's collective ops for PrivateUse1 but gives them no autograd kernel for
// it (only CPU/CUDA's): without these fallthroughs a spyre tensor stops at Autogradspyre.
TORCH_LIBRARY_IMPL(c10d, AutogradPrivateUse1, m) {
    for (const char* op :
         {"allreduce_", "allreduce_coalesced_", "broadcast_", "allgather_", "_allgather_base_",
          "reduce_scatter_", "_reduce_scatter_base_", "reduce_", "gather_", "scatter_", "send",
          "recv_", "recv_any_source_", "barrier", "allgather_into_tensor_coalesced_",
          "reduce_scatter_tensor_coalesced_", "alltoall_base_", "alltoall_"})
        m.impl(op, torch::CppFunction::makeFallthrough());
}
// The same for the functional collectives (torch.distributed._functional_collectives), which
// torch.compile traces dist.all_reduce & co. into: without them Dynamo breaks the graph at every
// collective ("could not find kernel ... at dispatch key AutogradPrivateUse1").
TORCH_LIBRARY_IMPL(_c10d_functional, AutogradPrivateUse1, m) {
    for (const char* op : {"all_reduce", "all_reduce_", "all_reduce_coalesced",
                           "all_reduce_coalesced_", "all_gather_into_tensor",
                           "all_gather_into_tensor_out", "all_gather_into_tensor_coalesced",
                           "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced",
                           "all_to_all_single", "broadcast", "broadcast_", "wait_tensor"})
        m.impl(op, torch::CppFunction::makeFallthrough());
}

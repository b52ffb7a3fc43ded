// A torch.distributed backend ("ccl") over Intel oneCCL's C++ API (ccl::v1), CPU tensors only.
//
// Threading model. Every oneCCL call of a backend (launching ops, testing their events) is made on one
// progress thread that the backend owns; callers only enqueue. oneCCL ops are non-blocking on CPU (they
// return a ccl::event), so the progress thread launches queued ops in FIFO order (collectives are matched
// across ranks by issue order, which one launching thread preserves) and then polls the in-flight events
// with event.test(), which never blocks. That makes timeouts enforceable: an op still in flight at its
// deadline fails its Work with an error naming the op and the timeout, instead of blocking forever inside
// oneCCL. oneCCL cannot cancel an op, so after a timeout the backend is marked broken: the op's buffers and
// events are kept alive (oneCCL may still write into them) and every later op fails at once.
//
// The group API (ccl::group_start/group_end) is not used: on this CPU build group_end() blocks until the
// whole group completes (no timeout possible) and event.test() is unsupported inside a group. Without it,
// point-to-point ops between a pair of ranks are matched in posting order per direction (the k-th send
// from A to B meets the k-th recv on B from A), whatever the order of ops with other peers; c10d tags are
// accepted but not used for matching (see README in the loader).
// torch/csrc/utils/pybind.h rather than torch/extension.h: the backend needs ATen, c10d and pybind11 with torch's
// type casters, not the C++ frontend (torch/all.h: nn, optim, data) that extension.h adds; parsing that was a
// quarter of the first build's compile time (~44 -> ~31 s of CPU on the 2-core VM).
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/distributed/c10d/exception.h>

#include <pybind11/chrono.h>

#include <oneapi/ccl.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace sarlab_ccl {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

// How long Work::wait() waits past an op's deadline for the progress thread to report before it gives up
// on the progress thread itself (only if that thread is stuck inside a oneCCL call, which should not happen).
constexpr Ms kWaitGrace{5000};

// After shutdown() starts, ops still in flight get at most this long before they are failed.
constexpr Ms kStopGrace{10000};

std::string fmt_ms(Ms ms) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.3f s", ms.count() / 1000.0);
  return buf;
}

std::exception_ptr dist_error(const std::string& msg) {
  return std::make_exception_ptr(c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, __LINE__}, msg));
}

// ---------------------------------------------------------------------------------------------- Work

class CclWork : public c10d::Work {
 public:
  CclWork(int rank, c10d::OpType type, std::string name, Ms timeout, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        name_(std::move(name)),
        timeout_(timeout),
        deadline_(Clock::now() + timeout),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  const std::string& name() const { return name_; }
  Ms timeout() const { return timeout_; }
  Clock::time_point deadline() const { return deadline_; }

  // Called by the progress thread exactly once.
  void complete(std::exception_ptr err) {
    finish(err);
    if (err) {
      future_->setError(err);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }

  bool wait(Ms timeout) override {
    auto limit = deadline_ + kWaitGrace;
    if (timeout != ::kNoTimeout) limit = std::min(limit, Clock::now() + timeout);
    bool by_caller = timeout != ::kNoTimeout && Clock::now() + timeout < deadline_ + kWaitGrace;
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_until(lock, limit, [&] { return completed_; })) {
      C10_THROW_ERROR(DistBackendError,
                      by_caller ? "ccl backend: wait(timeout=" + fmt_ms(timeout) + ") expired before " + name_ +
                                      " completed (the op itself may still complete later)"
                                : "ccl backend: " + name_ + " did not complete within its timeout of " +
                                      fmt_ms(timeout_) + " and the progress thread is stuck inside oneCCL");
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::string name_;
  Ms timeout_;
  Clock::time_point deadline_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// One oneCCL call: `start` runs on the progress thread and returns the event to poll; `after` (optional)
// runs there once the event completed (e.g. the division of an AVG all-reduce). The lambdas own the
// tensors they touch, which keeps the buffers alive while oneCCL uses them.
// `lane` >= 0 marks a point-to-point op: 2 * peer for a send, 2 * peer + 1 for a recv (see Op).
struct Launch {
  std::function<ccl::event()> start;
  std::function<void()> after;
  int lane = -1;
};

struct Task {
  c10::intrusive_ptr<CclWork> work;
  std::vector<Launch> launches;
};

// One launched (or, for a point-to-point op, possibly waiting) oneCCL call. Point-to-point ops wait in a lane
// per (peer, direction) and start only when the previous op of their lane completed: with more than one
// message in flight between two ranks in one direction, this oneCCL build (measured with libfabric 1.17's tcp
// and sockets providers) sometimes lets a small message overtake a large one, which then fails with
// "fi_cq_readerr: Truncation error" and aborts the process from oneCCL's worker thread. One message at a time
// per direction keeps the posting order and cannot deadlock: each lane only waits for the peer's matching
// lane, whose ops are posted in the same order.
struct Op {
  Launch launch;
  ccl::event event;
  bool started = false, done = false;
  std::string error;
};

struct InFlight {
  c10::intrusive_ptr<CclWork> work;
  std::vector<std::shared_ptr<Op>> ops;  // they own the tensors and `after`
};

// ---------------------------------------------------------------------------------------------- dtypes

ccl::datatype reduce_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return ccl::datatype::float32;
    case at::kDouble: return ccl::datatype::float64;
    case at::kHalf: return ccl::datatype::float16;
    case at::kBFloat16: return ccl::datatype::bfloat16;
    case at::kInt: return ccl::datatype::int32;
    case at::kLong: return ccl::datatype::int64;
    case at::kShort: return ccl::datatype::int16;
    case at::kChar: return ccl::datatype::int8;
    case at::kByte: return ccl::datatype::uint8;
    case at::kBool: return ccl::datatype::uint8;
    default:
      TORCH_CHECK(false, "ccl backend: all_reduce does not support dtype ", t.scalar_type(),
                  " (supported: float32/64, float16, bfloat16, int8/16/32/64, uint8, bool)");
  }
}

ccl::reduction reduction_of(const c10d::ReduceOp& op, const at::Tensor& t) {
  bool is_bool = t.scalar_type() == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return is_bool ? ccl::reduction::max : ccl::reduction::sum;  // logical or
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(at::isFloatingType(t.scalar_type()), "ccl backend: ReduceOp.AVG needs a floating dtype, got ",
                  t.scalar_type());
      return ccl::reduction::sum;  // divided by the world size afterwards
    case c10d::ReduceOp::PRODUCT: return is_bool ? ccl::reduction::min : ccl::reduction::prod;  // logical and
    case c10d::ReduceOp::MIN: return ccl::reduction::min;
    case c10d::ReduceOp::MAX: return ccl::reduction::max;
    default:
      TORCH_CHECK(false, "ccl backend: reduce op ", static_cast<int>(op.op_),
                  " is not supported (supported: SUM, AVG, PRODUCT, MIN, MAX)");
  }
}

void check_dense(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.device().is_cpu(), "ccl backend: ", op, " needs CPU tensors, got one on ", t.device());
  TORCH_CHECK(t.layout() == at::kStrided, "ccl backend: ", op, " needs dense (strided) tensors");
  TORCH_CHECK(t.is_contiguous(), "ccl backend: ", op, " needs contiguous tensors (call .contiguous() first)");
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* op) {
  TORCH_CHECK(ts.size() == 1, "ccl backend: ", op, " takes exactly one tensor per call, got ", ts.size());
  check_dense(ts[0], op);
  return ts[0];
}

size_t nbytes(const at::Tensor& t) { return t.numel() * t.element_size(); }

// ---------------------------------------------------------------------------------------------- Backend

class CclBackend : public c10d::Backend {
 public:
  CclBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, Ms timeout)
      : c10d::Backend(rank, size), timeout_(timeout) {
    static std::once_flag init_once;
    std::call_once(init_once, [] { ccl::init(); });
    // Rendezvous through the c10d store: rank 0 publishes the address of its main KVS, the others attach
    // to it. A generation number keeps a re-created group on the same store from reading a stale address.
    int64_t joined = store->add("sarlab_ccl/joined", 1);
    std::string key = "sarlab_ccl/kvs_address/" + std::to_string((joined - 1) / size);
    std::shared_ptr<ccl::kvs> kvs;
    if (rank == 0) {
      kvs = ccl::create_main_kvs();
      auto addr = kvs->get_address();
      store->set(key, std::vector<uint8_t>(addr.begin(), addr.end()));
    } else {
      std::vector<uint8_t> bytes = store->get(key);  // bounded by the store's own timeout
      ccl::kvs::address_type addr{};
      TORCH_CHECK(bytes.size() == addr.size(), "ccl backend: KVS address in the store has ", bytes.size(),
                  " bytes, expected ", addr.size(), " (ranks built against different oneCCL versions?)");
      std::copy(bytes.begin(), bytes.end(), addr.begin());
      kvs = ccl::create_kvs(addr);
    }
    comm_ = std::make_unique<ccl::communicator>(ccl::create_communicator(size, rank, kvs));
    kvs_ = kvs;
    progress_ = std::thread([this] { progress_loop(); });
  }

  ~CclBackend() override { stop(); }

  const std::string getBackendName() const override { return "ccl"; }
  void setTimeout(Ms timeout) override { timeout_ = timeout; }
  bool supportsCoalescing() const override { return true; }
  void shutdown() override { stop(); }

  // batch_isend_irecv: ops between startCoalescing and endCoalescing share one Work, launched together.
  void startCoalescing() override {
    TORCH_CHECK(!coalescing_, "ccl backend: startCoalescing called twice without endCoalescing");
    coalescing_ = true;
    batch_.clear();
    batch_work_ = c10::make_intrusive<CclWork>(rank_, c10d::OpType::COALESCED, "batch_isend_irecv", timeout_,
                                               std::vector<at::Tensor>{});
  }

  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    TORCH_CHECK(coalescing_, "ccl backend: endCoalescing without startCoalescing");
    coalescing_ = false;
    auto work = batch_work_;
    batch_work_.reset();
    enqueue(Task{work, std::move(batch_)});
    batch_.clear();
    return work;
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    at::Tensor t = single(tensors, "all_reduce");
    auto dtype = reduce_dtype(t);
    auto red = reduction_of(opts.reduceOp, t);
    bool avg = opts.reduceOp.op_ == c10d::ReduceOp::AVG;
    int world = size_;
    Launch l{[this, t, dtype, red] {
               return ccl::allreduce(t.data_ptr(), t.data_ptr(), t.numel(), dtype, red, *comm_);
             },
             avg ? std::function<void()>([t, world] { t.div_(world); }) : std::function<void()>()};
    return submit("all_reduce", c10d::OpType::ALLREDUCE, opts.timeout, {t}, {std::move(l)});
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    at::Tensor t = single(tensors, "broadcast");
    int root = static_cast<int>(opts.rootRank);
    check_peer(root, "broadcast");
    Launch l{[this, t, root] {
      return ccl::broadcast(t.data_ptr(), nbytes(t), ccl::datatype::uint8, root, *comm_);
    }};
    return submit("broadcast", c10d::OpType::BROADCAST, opts.timeout, {t}, {std::move(l)});
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    at::Tensor in = single(inputs, "all_gather");
    TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(size_),
                "ccl backend: all_gather needs one output list of world_size (", size_, ") tensors");
    std::vector<at::Tensor> outs = outputs[0];
    for (auto& o : outs) {
      check_dense(o, "all_gather");
      TORCH_CHECK(nbytes(o) == nbytes(in), "ccl backend: all_gather output tensors must have the input's size");
    }
    Launch l{[this, in, outs] {
      std::vector<void*> bufs;
      for (auto& o : outs) bufs.push_back(o.data_ptr());
      std::vector<size_t> counts(outs.size(), nbytes(in));
      return ccl::allgatherv(in.data_ptr(), nbytes(in), bufs, counts, ccl::datatype::uint8, *comm_);
    }};
    return submit("all_gather", c10d::OpType::ALLGATHER, opts.timeout, outs, {std::move(l)});
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    check_dense(input, "all_gather_into_tensor");
    check_dense(output, "all_gather_into_tensor");
    TORCH_CHECK(nbytes(output) == nbytes(input) * size_,
                "ccl backend: all_gather_into_tensor output must be world_size times the input");
    at::Tensor in = input, out = output;
    Launch l{[this, in, out] {
      std::vector<size_t> counts(size_, nbytes(in));
      return ccl::allgatherv(in.data_ptr(), nbytes(in), out.data_ptr(), counts, ccl::datatype::uint8, *comm_);
    }};
    return submit("all_gather_into_tensor", c10d::OpType::_ALLGATHER_BASE, opts.timeout, {out}, {std::move(l)});
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& out_splits, std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions& opts) override {
    check_dense(input, "all_to_all_single");
    check_dense(output, "all_to_all_single");
    TORCH_CHECK(input.scalar_type() == output.scalar_type(), "ccl backend: all_to_all_single dtypes differ");
    auto send = byte_counts(input, in_splits, "input");
    auto recv = byte_counts(output, out_splits, "output");
    at::Tensor in = input, out = output;
    Launch l{[this, in, out, send, recv] {
      return ccl::alltoallv(in.data_ptr(), send, out.data_ptr(), recv, ccl::datatype::uint8, *comm_);
    }};
    return submit("all_to_all_single", c10d::OpType::ALLTOALL_BASE, opts.timeout, {out}, {std::move(l)});
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    Launch l{[this] { return ccl::barrier(*comm_); }};
    return submit("barrier", c10d::OpType::BARRIER, opts.timeout, {}, {std::move(l)});
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int /*tag*/) override {
    at::Tensor t = single(tensors, "send");
    check_peer(dst, "send");
    Launch l{[this, t, dst] { return ccl::send(t.data_ptr(), nbytes(t), ccl::datatype::uint8, dst, *comm_); },
             {}, 2 * dst};
    return submit("send to rank " + std::to_string(dst), c10d::OpType::SEND, c10d::kUnsetTimeout, {t},
                  {std::move(l)});
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) override {
    at::Tensor t = single(tensors, "recv");
    check_peer(src, "recv");
    Launch l{[this, t, src] { return ccl::recv(t.data_ptr(), nbytes(t), ccl::datatype::uint8, src, *comm_); },
             {}, 2 * src + 1};
    return submit("recv from rank " + std::to_string(src), c10d::OpType::RECV, c10d::kUnsetTimeout, {t},
                  {std::move(l)});
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>&, int) override {
    TORCH_CHECK(false, "ccl backend: recv without a source rank is not supported (oneCCL has no any-source recv)");
  }

 private:
  void check_peer(int peer, const char* op) const {
    TORCH_CHECK(peer >= 0 && peer < size_, "ccl backend: ", op, " peer rank ", peer, " is outside [0, ", size_,
                ")");
  }

  // all_to_all_single split sizes (rows of dim 0; empty = equal parts) -> per-rank byte counts
  std::vector<size_t> byte_counts(const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    int64_t rows = t.dim() ? t.size(0) : 1;
    size_t row_bytes = rows ? nbytes(t) / rows : 0;
    std::vector<size_t> out(size_);
    if (splits.empty()) {
      TORCH_CHECK(rows % size_ == 0, "ccl backend: all_to_all_single ", which, " has ", rows,
                  " rows, not divisible by world size ", size_, "; pass split sizes");
      for (auto& c : out) c = row_bytes * (rows / size_);
      return out;
    }
    TORCH_CHECK(splits.size() == static_cast<size_t>(size_), "ccl backend: all_to_all_single ", which,
                " split sizes have ", splits.size(), " entries, expected world size ", size_);
    int64_t total = 0;
    for (int i = 0; i < size_; i++) {
      TORCH_CHECK(splits[i] >= 0, "ccl backend: negative split size");
      out[i] = row_bytes * splits[i];
      total += splits[i];
    }
    TORCH_CHECK(total == rows, "ccl backend: all_to_all_single ", which, " split sizes sum to ", total,
                " but the tensor has ", rows, " rows");
    return out;
  }

  c10::intrusive_ptr<c10d::Work> submit(const std::string& name, c10d::OpType type, Ms timeout,
                                        std::vector<at::Tensor> outputs, std::vector<Launch> launches) {
    if (coalescing_) {  // part of a batch: launched at endCoalescing, completed with the batch's Work
      for (auto& l : launches) batch_.push_back(std::move(l));
      return batch_work_;
    }
    Ms t = timeout == c10d::kUnsetTimeout ? timeout_ : timeout;
    auto work = c10::make_intrusive<CclWork>(rank_, type, name, t, std::move(outputs));
    enqueue(Task{work, std::move(launches)});
    return work;
  }

  void enqueue(Task task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      TORCH_CHECK(!stopping_, "ccl backend: ", task.work->name(), " posted after the process group was shut down");
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

  std::exception_ptr broken_error(const std::string& op) const {
    return dist_error("ccl backend: " + op + " refused: this process group is unusable since an earlier op failed (" +
                      broken_ + "); destroy it and create a new one (or restart the job)");
  }

  void start_op(Op& op) {
    try {
      op.event = op.launch.start();
      op.started = true;
    } catch (const std::exception& e) {
      op.error = std::string("failed to start in oneCCL: ") + e.what();
      op.done = true;
    }
  }

  void launch(Task& task) {
    if (!broken_.empty()) {
      task.work->complete(broken_error(task.work->name()));
      return;
    }
    InFlight f{task.work, {}};
    for (auto& l : task.launches) {
      auto op = std::make_shared<Op>();
      op->launch = std::move(l);
      f.ops.push_back(op);
      if (op->launch.lane < 0) {
        start_op(*op);
      } else {
        auto& lane = lanes_[op->launch.lane];
        lane.push_back(op);
        if (lane.size() == 1) start_op(*op);
      }
    }
    inflight_.push_back(std::move(f));
  }

  // Marks `op` done if its event completed; then starts the next op of its lane. Returns whether it finished.
  bool test_op(Op& op) {
    if (op.done || !op.started) return false;
    try {
      if (!op.event.test()) return false;
      if (op.launch.after) op.launch.after();
    } catch (const std::exception& e) {
      op.error = std::string("failed in oneCCL: ") + e.what();
    }
    op.done = true;
    if (op.launch.lane >= 0) {
      auto& lane = lanes_[op.launch.lane];
      lane.pop_front();  // `op` was its front: only the front of a lane is ever started
      if (!lane.empty()) start_op(*lane.front());
    }
    return true;
  }

  // Returns true if some op completed or failed.
  bool poll() {
    bool progressed = false;
    auto now = Clock::now();
    for (auto& f : inflight_)
      for (auto& op : f.ops) progressed = test_op(*op) || progressed;
    for (auto it = inflight_.begin(); it != inflight_.end();) {
      bool done = true;
      std::string error;
      for (auto& op : it->ops) {
        done = done && op->done;
        if (!op->error.empty() && error.empty()) error = op->error;
      }
      bool shut = stopping_ && now > stop_deadline_;
      bool late = now > it->work->deadline() || shut;
      if (!done && error.empty() && !late && broken_.empty()) {
        ++it;
        continue;
      }
      std::exception_ptr err;
      if (!done && error.empty() && !late) {  // an earlier op broke the group: fail fast
        err = broken_error(it->work->name());
      } else if (!error.empty()) {
        broken_ = it->work->name() + " " + error;
        err = dist_error("ccl backend: " + broken_);
      } else if (!done) {
        broken_ = it->work->name() + (shut ? " was still running " + fmt_ms(kStopGrace) + " after shutdown"
                                           : " timed out after " + fmt_ms(it->work->timeout()));
        err = dist_error("ccl backend: " + it->work->name() +
                         (shut ? " was still running " + fmt_ms(kStopGrace) + " after the process group shut down"
                               : " did not complete within the timeout of " + fmt_ms(it->work->timeout())) +
                         " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                         "); a peer is probably dead or stuck, or did not post the matching op");
      }
      it->work->complete(err);
      if (!done) leaked_.push_back(std::move(*it));  // oneCCL may still write into its buffers: never free them
      it = inflight_.erase(it);
      progressed = true;
    }
    return progressed;
  }

  void progress_loop() {
    int idle_rounds = 0;
    while (true) {
      std::deque<Task> fresh;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (inflight_.empty()) cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_ && queue_.empty() && inflight_.empty()) return;
        fresh.swap(queue_);
      }
      for (auto& task : fresh) launch(task);
      if (poll() || !fresh.empty()) {
        idle_rounds = 0;
      } else if (++idle_rounds < 20) {
        std::this_thread::yield();
      } else {
        // With oneCCL's worker thread, it moves the data and test() only checks; without it (CCL_WORKER_OFFLOAD=0,
        // set where ranks share cores) each test() also advances oneCCL's transfers. Sleeping rather than spinning
        // leaves the cores to the ranks still computing: with ranks sharing a few cores, spinning cost milliseconds.
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
      if (stopping_ && !broken_.empty() && !(queue_.empty() && inflight_.empty())) {  // don't wait for ops that can never finish
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& task : queue_) task.work->complete(broken_error(task.work->name()));
        queue_.clear();
        for (auto& f : inflight_) {
          f.work->complete(broken_error(f.work->name()));
          leaked_.push_back(std::move(f));
        }
        inflight_.clear();
      }
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      stop_deadline_ = Clock::now() + kStopGrace;
      stopping_ = true;
    }
    cv_.notify_one();
    if (progress_.joinable()) progress_.join();  // drains pending ops (each bounded by its deadline)
    if (!broken_.empty() || !leaked_.empty()) {
      // Tearing down a communicator with unfinished ops can block on the dead peer: leak it instead.
      (void)comm_.release();
      new std::shared_ptr<ccl::kvs>(std::move(kvs_));
      new std::vector<InFlight>(std::move(leaked_));
    }
  }

  Ms timeout_;
  std::unique_ptr<ccl::communicator> comm_;
  std::shared_ptr<ccl::kvs> kvs_;

  // caller side (the thread that posts ops; c10d posts from the Python thread)
  bool coalescing_ = false;
  std::vector<Launch> batch_;
  c10::intrusive_ptr<CclWork> batch_work_;

  // shared between callers and the progress thread
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::atomic<bool> stopping_{false};
  Clock::time_point stop_deadline_;  // written before stopping_ is set

  // progress thread only
  std::vector<InFlight> inflight_;
  std::vector<InFlight> leaked_;
  std::unordered_map<int, std::deque<std::shared_ptr<Op>>> lanes_;
  std::string broken_;
  std::thread progress_;
};

}  // namespace sarlab_ccl

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  py::module_::import("torch.distributed");  // registers c10d::Backend / Store with pybind
  py::class_<sarlab_ccl::CclBackend, c10d::Backend, c10::intrusive_ptr<sarlab_ccl::CclBackend>>(m, "CclBackend");
  m.def(
      "create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
        return c10::make_intrusive<sarlab_ccl::CclBackend>(store, rank, size, timeout);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>(),
      "Create the ccl backend of one process group (the creator given to Backend.register_backend).");
  m.def("library_version", [] {
    auto v = ccl::get_library_version();
    return std::to_string(v.major) + "." + std::to_string(v.minor) + "." + std::to_string(v.update);
  });
}

// CPU expert executor for a decode-size MoE layer, plus the host half of the GPU<->CPU handshake.
//
// forward(): top-k routing given as expert ids + router weights; per routed (token, k) pair
// gate/up = x W13[e]^T, h = silu(gate) * up (rounded to the activation dtype, as a bf16 GPU pipeline stores
// it), y = h W2[e]^T; out[t] = sum_k w[t,k] y[t,k] in ascending k. Every output element is computed by one
// thread in a fixed order, so results are bit-identical for any thread count: graph replay can be held to
// exactly the eager answer.
//
// Slots: executor-owned parameter storage (hidden, ids, router weights, output) and two signal words per slot,
// in memory the caller provides (plain host memory on CPU, mapped pinned memory for a GPU). A service thread
// answers `req == 1` on a slot: it clears req, computes from the slot's buffers, and publishes `done = 1`; the
// waiter (a GPU wait-value node, or notify_wait on the CPU backend) consumes the token by writing done = 0,
// so the frozen compare values of a captured graph (`req := 1`, `wait done == 1`, `done := 0`) are right on
// every replay: a captured memop's compare value is frozen at capture, so only constants may be compared.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cpu_moe_formats.h"

namespace py = pybind11;

namespace graphsafe::cpu_moe {

enum class DType : int { kF32 = 0, kBF16 = 1 };

inline int64_t dtype_size(DType d) { return d == DType::kF32 ? 4 : 2; }

inline DType checked_dtype(int d) {
  if (d != 0 && d != 1) {
    throw std::invalid_argument("dtype code " + std::to_string(d) + " not supported: allowed 0 (float32), 1 (bfloat16)");
  }
  return static_cast<DType>(d);
}

// Fixed pool: `num_threads - 1` workers plus the calling thread pull task indices from one counter.
class Pool {
 public:
  explicit Pool(int num_threads) : num_threads_(num_threads) {
    for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int num_threads() const { return num_threads_; }

  void run(int64_t num_tasks, const std::function<void(int64_t)>& fn) {
    if (num_tasks <= 0) return;
    if (workers_.empty() || num_tasks == 1) {
      for (int64_t i = 0; i < num_tasks; ++i) fn(i);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      num_tasks_ = num_tasks;
      next_.store(0);
      finished_.store(0);
      ++generation_;
    }
    cv_.notify_all();
    drain();
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return finished_.load() == num_tasks_; });
    fn_ = nullptr;
  }

 private:
  void drain() {
    for (;;) {
      const int64_t i = next_.fetch_add(1);
      if (i >= num_tasks_) return;
      (*fn_)(i);
      if (finished_.fetch_add(1) + 1 == num_tasks_) {
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_all();
      }
    }
  }
  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
        if (!fn_) continue;
      }
      drain();
    }
  }

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_{0}, finished_{0};
  uint64_t generation_ = 0;
  bool stop_ = false;
};

class Executor;

// Byte offsets inside one slot's buffer; every region 64-byte aligned.
struct SlotLayout {
  int64_t hidden = 0, ids = 0, weights = 0, out = 0, total = 0;
};

inline int64_t align64(int64_t x) { return (x + 63) / 64 * 64; }

inline SlotLayout slot_layout(int64_t capacity, int64_t top_k, DType dt, int64_t H) {
  SlotLayout l;
  l.hidden = 0;
  l.ids = align64(capacity * H * dtype_size(dt));
  l.weights = l.ids + align64(capacity * top_k * 4);
  l.out = l.weights + align64(capacity * top_k * 4);
  l.total = l.out + align64(capacity * H * dtype_size(dt));
  return l;
}

// Signal block: 128 bytes per slot; req at +0 and done at +64 so GPU and CPU writes do not share a line.
constexpr int64_t kSignalStride = 128;

struct Slot {
  Executor* ex = nullptr;
  int index = 0;
  int64_t tokens = 0;  // frozen at creation: a captured graph always moves this many rows
  int64_t top_k = 0;
  DType dtype = DType::kF32;
  uint8_t* base = nullptr;
  SlotLayout layout;
  uint32_t* req = nullptr;
  uint32_t* done = nullptr;
  std::atomic<int64_t> served{0};
  std::atomic<bool> ignored{false};
};

inline uint32_t load_acquire(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline void store_release(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

// Dot product with 8 partial sums in a fixed order: vectorizable without -ffast-math, deterministic.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (; i < n; ++i) acc[i % 8] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

class Executor {
 public:
  Executor(int num_threads, int max_slots) : pool_(num_threads), max_slots_(max_slots) {
    if (num_threads < 1) throw std::invalid_argument("num_threads must be >= 1, got " + std::to_string(num_threads));
    if (max_slots < 1) throw std::invalid_argument("max_slots must be >= 1, got " + std::to_string(max_slots));
    slots_.resize(max_slots);
  }
  ~Executor() { stop_service(); }

  int num_threads() const { return pool_.num_threads(); }
  int max_slots() const { return max_slots_; }
  int num_slots() const { return num_slots_.load(std::memory_order_acquire); }
  int64_t hidden_size() const { return H_; }

  void set_layer(Matrix w13, Matrix w2) {
    w13.validate("w13");
    w2.validate("w2");
    if (w13.E != w2.E || w13.N % 2 != 0 || w2.K != w13.N / 2 || w2.N != w13.K) {
      throw std::invalid_argument("w13 must be [E, 2I, H] and w2 [E, H, I] with matching E, H, I");
    }
    std::lock_guard<std::mutex> lock(compute_mu_);
    w13_ = w13;
    w2_ = w2;
    E_ = w13.E;
    H_ = w13.K;
    I_ = w13.N / 2;
  }

  // Compute one MoE layer. Tokens with an expert id outside [0, E) get a NaN row: NaN is a failure.
  int64_t forward(const void* hidden, DType dt, const int32_t* ids, const float* rw, void* out, int64_t T,
                  int64_t top_k) {
    if (!E_) throw std::invalid_argument("executor has no layer: call set_layer first");
    std::lock_guard<std::mutex> lock(compute_mu_);
    const int64_t H = H_, I = I_, P = T * top_k;
    x_.assign(T * H, 0.0f);
    for (int64_t i = 0; i < T * H; ++i) {
      x_[i] = dt == DType::kF32 ? static_cast<const float*>(hidden)[i]
                                : bf16_to_f32(static_cast<const uint16_t*>(hidden)[i]);
    }
    // Pairs grouped by expert: each weight row is dequantized once per call and reused by every pair.
    std::vector<std::vector<int64_t>> by_expert(E_);
    std::vector<char> bad_token(T, 0);
    int64_t invalid = 0;
    for (int64_t p = 0; p < P; ++p) {
      const int32_t e = ids[p];
      if (e < 0 || e >= E_) {
        bad_token[p / top_k] = 1;
        ++invalid;
        continue;
      }
      by_expert[e].push_back(p);
    }
    std::vector<int64_t> active;
    for (int64_t e = 0; e < E_; ++e) {
      if (!by_expert[e].empty()) active.push_back(e);
    }
    gu_.assign(P * 2 * I, 0.0f);
    h_.assign(P * I, 0.0f);
    y_.assign(P * H, 0.0f);
    constexpr int64_t kRows = 32;
    const int64_t chunks13 = (2 * I + kRows - 1) / kRows;
    pool_.run(static_cast<int64_t>(active.size()) * chunks13, [&](int64_t task) {
      const int64_t e = active[task / chunks13], r0 = (task % chunks13) * kRows;
      std::vector<float> wrow(H);
      for (int64_t r = r0; r < std::min(r0 + kRows, 2 * I); ++r) {
        w13_.dequant_row(e, r, wrow.data());
        for (int64_t p : by_expert[e]) gu_[p * 2 * I + r] = dot(&x_[(p / top_k) * H], wrow.data(), H);
      }
    });
    for (int64_t p = 0; p < P; ++p) {
      for (int64_t i = 0; i < I; ++i) {
        const float g = gu_[p * 2 * I + i], u = gu_[p * 2 * I + I + i];
        const float hv = g / (1.0f + std::exp(-g)) * u;
        h_[p * I + i] = dt == DType::kBF16 ? bf16_to_f32(f32_to_bf16(hv)) : hv;
      }
    }
    const int64_t chunks2 = (H + kRows - 1) / kRows;
    pool_.run(static_cast<int64_t>(active.size()) * chunks2, [&](int64_t task) {
      const int64_t e = active[task / chunks2], r0 = (task % chunks2) * kRows;
      std::vector<float> wrow(I);
      for (int64_t r = r0; r < std::min(r0 + kRows, H); ++r) {
        w2_.dequant_row(e, r, wrow.data());
        for (int64_t p : by_expert[e]) y_[p * H + r] = dot(&h_[p * I], wrow.data(), I);
      }
    });
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < H; ++c) {
        float acc = 0.0f;
        for (int64_t k = 0; k < top_k; ++k) acc += rw[t * top_k + k] * y_[(t * top_k + k) * H + c];
        if (bad_token[t]) acc = nan;
        if (dt == DType::kF32) {
          static_cast<float*>(out)[t * H + c] = acc;
        } else {
          static_cast<uint16_t*>(out)[t * H + c] = f32_to_bf16(acc);
        }
      }
    }
    return invalid;
  }

  // ---- slots -------------------------------------------------------------------------------------------
  int add_slot(int64_t tokens, int64_t top_k, DType dt, uint8_t* base, uint8_t* signals) {
    if (!H_) throw std::invalid_argument("executor has no layer: call set_layer before add_slot");
    if (tokens < 1 || top_k < 1) throw std::invalid_argument("slot tokens and top_k must be >= 1");
    if (!base || !signals) throw std::invalid_argument("slot memory pointers must be non-null");
    std::lock_guard<std::mutex> lock(slot_mu_);
    const int i = num_slots_.load();
    if (i >= max_slots_) {
      throw std::invalid_argument("slot capacity exhausted: max_slots=" + std::to_string(max_slots_) +
                                  " (derive it from the configured graph sizes)");
    }
    auto s = std::make_unique<Slot>();
    s->ex = this;
    s->index = i;
    s->tokens = tokens;
    s->top_k = top_k;
    s->dtype = dt;
    s->base = base;
    s->layout = slot_layout(tokens, top_k, dt, H_);
    s->req = reinterpret_cast<uint32_t*>(signals);
    s->done = reinterpret_cast<uint32_t*>(signals + 64);
    store_release(s->req, 0);
    store_release(s->done, 0);
    slots_[i] = std::move(s);
    num_slots_.store(i + 1, std::memory_order_release);
    return i;
  }

  Slot& slot(int i) {
    if (i < 0 || i >= num_slots()) {
      throw std::invalid_argument("slot index " + std::to_string(i) + " out of range [0, " +
                                  std::to_string(num_slots()) + ")");
    }
    return *slots_[i];
  }

  void run_slot(Slot& s) {
    const auto& l = s.layout;
    forward(s.base + l.hidden, s.dtype, reinterpret_cast<const int32_t*>(s.base + l.ids),
            reinterpret_cast<const float*>(s.base + l.weights), s.base + l.out, s.tokens, s.top_k);
    s.served.fetch_add(1);
  }

  // Emulated stream side of the handshake (CPU backend): post the token, wait for the answer, consume it.
  bool notify_wait(Slot& s, int64_t timeout_us) {
    store_release(s.req, 1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(timeout_us);
    int64_t spins = 0;
    while (load_acquire(s.done) != 1) {
      if (++spins > 2000) std::this_thread::sleep_for(std::chrono::microseconds(20));
      if (std::chrono::steady_clock::now() > deadline) return false;
    }
    store_release(s.done, 0);
    return true;
  }

  // ---- service thread ----------------------------------------------------------------------------------
  void start_service() {
    std::lock_guard<std::mutex> lock(service_mu_);
    if (service_.joinable()) return;
    stop_.store(false);
    service_ = std::thread([this] { service_loop(); });
  }
  void stop_service() {
    std::lock_guard<std::mutex> lock(service_mu_);
    if (!service_.joinable()) return;
    stop_.store(true);
    service_.join();
  }
  bool service_running() {
    std::lock_guard<std::mutex> lock(service_mu_);
    return service_.joinable();
  }
  void set_service_delay_us(int64_t us) { service_delay_us_.store(us); }

 private:
  void service_loop() {
    int64_t idle = 0;
    while (!stop_.load()) {
      bool any = false;
      const int n = num_slots();
      for (int i = 0; i < n; ++i) {
        Slot& s = *slots_[i];
        if (s.ignored.load() || load_acquire(s.req) != 1) continue;
        store_release(s.req, 0);
        const int64_t delay = service_delay_us_.load();
        if (delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
        run_slot(s);
        store_release(s.done, 1);
        any = true;
      }
      // Spin ~2000 empty polls (tens of microseconds) for decode latency, then back off to 50 us sleeps
      // so an idle executor does not hold one of CI's two cores.
      idle = any ? 0 : idle + 1;
      if (idle > 2000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  Pool pool_;
  int max_slots_;
  std::mutex compute_mu_, slot_mu_, service_mu_;
  Matrix w13_, w2_;
  int64_t E_ = 0, H_ = 0, I_ = 0;
  std::vector<float> x_, gu_, h_, y_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<int> num_slots_{0};
  std::thread service_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> service_delay_us_{0};
};

}  // namespace graphsafe::cpu_moe

// Host-function entry point for the GPU `hostfn` handshake (cudaLaunchHostFunc / hipLaunchHostFunc): the
// userData is the Slot*, stable for the executor's lifetime, so its value frozen in a graph stays valid.
extern "C" void graphsafe_cpu_moe_run_slot(void* slot) {
  auto* s = static_cast<graphsafe::cpu_moe::Slot*>(slot);
  s->ex->run_slot(*s);
}

namespace {

using graphsafe::cpu_moe::Executor;
using graphsafe::cpu_moe::Format;
using graphsafe::cpu_moe::Matrix;

template <typename T>
T* ptr(uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

Matrix make_matrix(int fmt, int64_t E, int64_t N, int64_t K, uintptr_t data, uintptr_t scales, uintptr_t gs) {
  if (!graphsafe::cpu_moe::is_supported(fmt)) {
    throw std::invalid_argument("format code " + std::to_string(fmt) + " not supported: allowed " +
                                std::to_string(GS_FMT_BF16) + " bf16, " + std::to_string(GS_FMT_MXFP4) +
                                " mxfp4, " + std::to_string(GS_FMT_NVFP4) + " nvfp4, " +
                                std::to_string(GS_FMT_Q4_0) + " q4_0, " + std::to_string(GS_FMT_BLOCK_FP8) +
                                " block_fp8");
  }
  Matrix m;
  m.fmt = static_cast<Format>(fmt);
  m.E = E;
  m.N = N;
  m.K = K;
  m.data = ptr<const uint8_t>(data);
  m.scales = ptr<const uint8_t>(scales);
  m.global_scale = ptr<const float>(gs);
  return m;
}

}  // namespace

PYBIND11_MODULE(GS_MODULE_NAME, m) {
  using namespace graphsafe::cpu_moe;
  m.doc() = "graphsafe CPU MoE expert executor (pointers in, no torch headers)";
  m.attr("SIGNAL_STRIDE") = kSignalStride;
  m.def("run_slot_fn", [] { return reinterpret_cast<uintptr_t>(&graphsafe_cpu_moe_run_slot); });
  m.def("dequant_rows", [](int fmt, int64_t E, int64_t N, int64_t K, uintptr_t data, uintptr_t scales,
                           uintptr_t gs, uintptr_t out) {
    Matrix mat = make_matrix(fmt, E, N, K, data, scales, gs);
    mat.validate("matrix");
    float* o = ptr<float>(out);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t n = 0; n < N; ++n) mat.dequant_row(e, n, o + (e * N + n) * K);
  });
  py::class_<Executor>(m, "Executor")
      .def(py::init<int, int>(), py::arg("num_threads"), py::arg("max_slots"))
      .def_property_readonly("num_threads", &Executor::num_threads)
      .def_property_readonly("max_slots", &Executor::max_slots)
      .def_property_readonly("num_slots", &Executor::num_slots)
      .def("set_layer",
           [](Executor& ex, int fmt, int64_t E, int64_t H, int64_t I, uintptr_t w13, uintptr_t w13_s,
              uintptr_t w13_g, uintptr_t w2, uintptr_t w2_s, uintptr_t w2_g) {
             ex.set_layer(make_matrix(fmt, E, 2 * I, H, w13, w13_s, w13_g), make_matrix(fmt, E, H, I, w2, w2_s, w2_g));
           })
      .def(
          "forward",
          [](Executor& ex, uintptr_t hidden, int dt, uintptr_t ids, uintptr_t rw, uintptr_t out, int64_t T,
             int64_t top_k) {
            const DType d = checked_dtype(dt);
            py::gil_scoped_release nogil;
            return ex.forward(ptr<const void>(hidden), d, ptr<const int32_t>(ids), ptr<const float>(rw),
                              ptr<void>(out), T, top_k);
          },
          "Compute one layer; returns the number of (token, k) pairs with an out-of-range expert id.")
      .def("slot_layout",
           [](Executor& ex, int64_t tokens, int64_t top_k, int dt) {
             const SlotLayout l = slot_layout(tokens, top_k, checked_dtype(dt), ex.hidden_size());
             py::dict d;
             d["hidden"] = l.hidden;
             d["ids"] = l.ids;
             d["weights"] = l.weights;
             d["out"] = l.out;
             d["total"] = l.total;
             return d;
           })
      .def("add_slot",
           [](Executor& ex, int64_t tokens, int64_t top_k, int dt, uintptr_t base, uintptr_t signals) {
             return ex.add_slot(tokens, top_k, checked_dtype(dt), ptr<uint8_t>(base), ptr<uint8_t>(signals));
           })
      .def("slot_handle", [](Executor& ex, int i) { return reinterpret_cast<uintptr_t>(&ex.slot(i)); })
      .def("run_slot",
           [](Executor& ex, int i) {
             Slot& s = ex.slot(i);
             py::gil_scoped_release nogil;
             ex.run_slot(s);
           })
      .def("notify_wait",
           [](Executor& ex, int i, int64_t timeout_us) {
             Slot& s = ex.slot(i);
             py::gil_scoped_release nogil;
             return ex.notify_wait(s, timeout_us);
           })
      .def("release", [](Executor& ex, int i) { store_release(ex.slot(i).done, 1); },
           "Watchdog: answer slot i's wait without computing (the GPU queue must never hang).")
      .def("signals",
           [](Executor& ex, int i) {
             Slot& s = ex.slot(i);
             return py::make_tuple(load_acquire(s.req), load_acquire(s.done));
           })
      .def("served", [](Executor& ex, int i) { return ex.slot(i).served.load(); })
      .def("set_slot_ignored", [](Executor& ex, int i, bool v) { ex.slot(i).ignored.store(v); })
      .def("start_service", &Executor::start_service)
      .def("stop_service", &Executor::stop_service, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("service_running", &Executor::service_running)
      .def("set_service_delay_us", &Executor::set_service_delay_us);
}

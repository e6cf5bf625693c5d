// cpu_moe.h -- the CPU expert executor's types and entry points, between its pybind11 layer
// (cpu_moe.bind.cpp) and its implementation (cpu_moe.cpp).
//
// Role: the class layout and the cheap accessors live here; everything that computes (forward, the slots,
// the service thread, dequantization) is defined in cpu_moe.cpp, so the binding layer, which pays seconds of
// g++ for pybind11 alone, compiles beside the math instead of after it (kernels/common/native.py,
// "Translation units"). What the executor does and why: cpu_moe.cpp.
#pragma once

#include <stdint.h>

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
  Executor(int num_threads, int max_slots);
  ~Executor();

  int num_threads() const { return pool_.num_threads(); }
  int max_slots() const { return max_slots_; }
  int num_slots() const { return num_slots_.load(std::memory_order_acquire); }
  int64_t hidden_size() const { return H_; }

  void set_layer(Matrix w13, Matrix w2);

  // Compute one MoE layer. Tokens with an expert id outside [0, E) get a NaN row: NaN is a failure.
  int64_t forward(const void* hidden, DType dt, const int32_t* ids, const float* rw, void* out, int64_t T,
                  int64_t top_k);

  // ---- slots -------------------------------------------------------------------------------------------
  int add_slot(int64_t tokens, int64_t top_k, DType dt, uint8_t* base, uint8_t* signals);

  Slot& slot(int i);

  void run_slot(Slot& s);

  // Emulated stream side of the handshake (CPU backend): post the token, wait for the answer, consume it.
  bool notify_wait(Slot& s, int64_t timeout_us);

  // ---- service thread ----------------------------------------------------------------------------------
  void start_service();
  void stop_service();
  bool service_running();
  void set_service_delay_us(int64_t us) { service_delay_us_.store(us); }

 private:
  void service_loop();

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

// Dequantize every row of `mat` into out[E, N, K] (f32), as Executor::forward decodes them.
void dequant_rows(const Matrix& mat, float* out);

}  // namespace graphsafe::cpu_moe

// Host-function entry point for the GPU `hostfn` handshake (cudaLaunchHostFunc / hipLaunchHostFunc): the
// userData is the Slot*, stable for the executor's lifetime, so its value frozen in a graph stays valid.
extern "C" void graphsafe_cpu_moe_run_slot(void* slot);

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
#include "cpu_moe.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

namespace graphsafe::cpu_moe {

Executor::Executor(int num_threads, int max_slots) : pool_(num_threads), max_slots_(max_slots) {
  if (num_threads < 1) throw std::invalid_argument("num_threads must be >= 1, got " + std::to_string(num_threads));
  if (max_slots < 1) throw std::invalid_argument("max_slots must be >= 1, got " + std::to_string(max_slots));
  slots_.resize(max_slots);
}

Executor::~Executor() { stop_service(); }

void Executor::set_layer(Matrix w13, Matrix w2) {
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

int64_t Executor::forward(const void* hidden, DType dt, const int32_t* ids, const float* rw, void* out, int64_t T,
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

int Executor::add_slot(int64_t tokens, int64_t top_k, DType dt, uint8_t* base, uint8_t* signals) {
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

Slot& Executor::slot(int i) {
  if (i < 0 || i >= num_slots()) {
    throw std::invalid_argument("slot index " + std::to_string(i) + " out of range [0, " +
                                std::to_string(num_slots()) + ")");
  }
  return *slots_[i];
}

void Executor::run_slot(Slot& s) {
  const auto& l = s.layout;
  forward(s.base + l.hidden, s.dtype, reinterpret_cast<const int32_t*>(s.base + l.ids),
          reinterpret_cast<const float*>(s.base + l.weights), s.base + l.out, s.tokens, s.top_k);
  s.served.fetch_add(1);
}

bool Executor::notify_wait(Slot& s, int64_t timeout_us) {
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

void Executor::start_service() {
  std::lock_guard<std::mutex> lock(service_mu_);
  if (service_.joinable()) return;
  stop_.store(false);
  service_ = std::thread([this] { service_loop(); });
}

void Executor::stop_service() {
  std::lock_guard<std::mutex> lock(service_mu_);
  if (!service_.joinable()) return;
  stop_.store(true);
  service_.join();
}

bool Executor::service_running() {
  std::lock_guard<std::mutex> lock(service_mu_);
  return service_.joinable();
}

void Executor::service_loop() {
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

void dequant_rows(const Matrix& mat, float* out) {
  for (int64_t e = 0; e < mat.E; ++e)
    for (int64_t n = 0; n < mat.N; ++n) mat.dequant_row(e, n, out + (e * mat.N + n) * mat.K);
}

}  // namespace graphsafe::cpu_moe

extern "C" void graphsafe_cpu_moe_run_slot(void* slot) {
  auto* s = static_cast<graphsafe::cpu_moe::Slot*>(slot);
  s->ex->run_slot(*s);
}

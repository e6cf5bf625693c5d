// scan_host.cpp -- the clean-path comparison of harness/scan.py on the CPU, in one pass over memory.
//
// Role: the host twin of scan.hip with a plain C ABI (ctypes, no torch headers), built by g++ through
// harness/native/build.py. For two arrays of one float type (float32, float16, bfloat16) it computes
// max|out - ref| and max|ref| in float32 plus a flag for any non-finite out, ref or difference (ref == nullptr:
// max|out|), and for two byte arrays whether any byte differs. harness/scan.py decides what the numbers mean.
//
// Why native: torch has no fused subtract-and-reduce on the CPU, so the torch path writes each chunk's
// difference before reducing it, and reads well below the copy's bandwidth that way. One loop that reads each
// input once and keeps its maxima in registers is bound by memory reads alone.
//
// Arithmetic as in scan.hip and the torch path: each element widened to float32 exactly, one float32
// subtraction, maxima kept as the bits of non-negative floats (ordered like the values).
#include <omp.h>

#include <cstdint>
#include <cstring>

namespace {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1Fu) return bits_to_float(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // mantissa * 2^-24, exact
    return sign ? -magnitude : magnitude;
  }
  return bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

template <int KIND>
inline float load(const void* base, int64_t i) {
  if (KIND == 0) return static_cast<const float*>(base)[i];
  uint16_t h = static_cast<const uint16_t*>(base)[i];
  if (KIND == 1) return half_to_float(h);
  return bits_to_float(static_cast<uint32_t>(h) << 16);
}

struct Maxima {
  uint32_t diff = 0, ref = 0, bad = 0;
};

// One contiguous range. The float32 and bfloat16 loop bodies have no branches, which lets GCC vectorize them
// (at -O3: harness/native/__init__.py builds this file so).
template <int KIND>
Maxima scan_range(const void* out, const void* ref, int64_t begin, int64_t end) {
  Maxima m;
  for (int64_t i = begin; i < end; ++i) {
    float o = load<KIND>(out, i);
    float r = ref ? load<KIND>(ref, i) : 0.0f;
    float d = o - r;
    uint32_t db = float_bits(d) & 0x7FFFFFFFu, rb = float_bits(r) & 0x7FFFFFFFu;
    uint32_t ob = float_bits(o) & 0x7FFFFFFFu;
    // Non-finite: exponent all ones, i.e. the magnitude bits at or above infinity's.
    m.bad |= (ob >= 0x7F800000u) | (rb >= 0x7F800000u) | (db >= 0x7F800000u);
    m.diff = db > m.diff ? db : m.diff;
    m.ref = rb > m.ref ? rb : m.ref;
  }
  return m;
}

template <int KIND>
Maxima scan_all(const void* out, const void* ref, int64_t n) {
  Maxima total;
  // Chunks of 1 Mi elements: large enough that the threads' start-up is noise, small enough to split 64 MiB
  // over every core.
  const int64_t chunk = int64_t(1) << 20;
  const int64_t chunks = (n + chunk - 1) / chunk;
  // One chunk runs on the calling thread: a team's closing barrier waits for every thread, and on a busy
  // machine a descheduled one costs a time slice (a 4096-float comparison took hundreds of times as long on
  // the 2-core box while compilers ran beside it).
#pragma omp parallel if (chunks > 1)
  {
    Maxima mine;
#pragma omp for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      int64_t begin = c * chunk, end = begin + chunk < n ? begin + chunk : n;
      Maxima part = scan_range<KIND>(out, ref, begin, end);
      mine.bad |= part.bad;
      mine.diff = part.diff > mine.diff ? part.diff : mine.diff;
      mine.ref = part.ref > mine.ref ? part.ref : mine.ref;
    }
#pragma omp critical
    {
      total.bad |= mine.bad;
      total.diff = mine.diff > total.diff ? mine.diff : total.diff;
      total.ref = mine.ref > total.ref ? mine.ref : total.ref;
    }
  }
  return total;
}

}  // namespace

extern "C" {

// kind: 0 float32, 1 float16, 2 bfloat16; ref may be null. result[0] = max|out - ref|, result[1] = max|ref|,
// result[2] = 1.0 if any value or difference was not finite (the maxima are then meaningless). Returns 0, or
// -1 for an argument it does not accept.
int graphsafe_scan_floats_host(const void* out, const void* ref, long long n, int kind, float* result) {
  if (n <= 0 || kind < 0 || kind > 2) return -1;
  Maxima m = kind == 0 ? scan_all<0>(out, ref, n) : kind == 1 ? scan_all<1>(out, ref, n) : scan_all<2>(out, ref, n);
  result[0] = m.bad ? 0.0f : bits_to_float(m.diff);
  result[1] = m.bad ? 0.0f : bits_to_float(m.ref);
  result[2] = m.bad ? 1.0f : 0.0f;
  return 0;
}

// *differ = 1 if any of the nbytes bytes of a and b differ, else 0.
int graphsafe_scan_bytes_differ_host(const void* a, const void* b, long long nbytes, int* differ) {
  if (nbytes <= 0) return -1;
  *differ = std::memcmp(a, b, static_cast<size_t>(nbytes)) != 0 ? 1 : 0;
  return 0;
}

}  // extern "C"

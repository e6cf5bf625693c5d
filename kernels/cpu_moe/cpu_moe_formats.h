// Weight formats of the CPU expert executor: scalar decoders and one-row dequantization.
//
// Bit layouts (kernels/common/quant.py packs the same bytes, kernels/cpu_moe/weights.py hands them over; tests check
// both agree bit for bit):
//   bf16       uint16 [E, N, K]
//   mxfp4      e2m1 nibbles [E, N, K/2] (element 2j in the low nibble, as torch.float4_e2m1fn_x2),
//              E8M0 scales [E, N, K/32] (OCP MX v1.0: one scale per 32 elements, 0xFF is NaN)
//   nvfp4      e2m1 nibbles [E, N, K/2], e4m3fn scales [E, N, K/16], one fp32 global scale per expert
//   q4_0       ggml Q4_0 split into arrays: nibbles [E, N, K/2], fp16 d [E, N, K/32]; in each block of 32, byte j
//              holds element j (low nibble) and element j + 16 (high nibble); value = (nibble - 8) * d
//   block_fp8  e4m3fn [E, N, K], fp32 scales [E, ceil(N/128), ceil(K/128)] (DeepSeek-V3 weight_scale_inv)
// These are kernels/common/quant.py's layouts; its dequantizers do the same f32 operations in the same order
// (decode, then one multiply per scale; nvfp4: value * (block scale * global)), so decoded rows are
// bit-identical to quant.dequantize_weight (tests/test_cpu_moe.py checks every format).
// No torch headers: the module is built by g++ in seconds (a torch C++ extension takes about a minute).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "gs_formats.h"

namespace graphsafe::cpu_moe {

// The subset of the shared format codes (gs_formats.h) the CPU executor decodes.
enum class Format : int {
  kBF16 = GS_FMT_BF16,
  kMXFP4 = GS_FMT_MXFP4,
  kNVFP4 = GS_FMT_NVFP4,
  kQ4_0 = GS_FMT_Q4_0,
  kFP8Block = GS_FMT_BLOCK_FP8,
};

inline bool is_supported(int code) {
  return code == GS_FMT_BF16 || code == GS_FMT_MXFP4 || code == GS_FMT_NVFP4 || code == GS_FMT_Q4_0 ||
         code == GS_FMT_BLOCK_FP8;
}

inline const char* format_name(Format f) {
  switch (f) {
    case Format::kBF16: return "bf16";
    case Format::kMXFP4: return "mxfp4";
    case Format::kNVFP4: return "nvfp4";
    case Format::kQ4_0: return "q4_0";
    case Format::kFP8Block: return "block_fp8";
  }
  return "?";
}

// Elements per scale block along K, per format (0: no K blocking).
inline int64_t k_block(Format f) {
  switch (f) {
    case Format::kMXFP4: return 32;
    case Format::kNVFP4: return 16;
    case Format::kQ4_0: return 32;
    case Format::kFP8Block: return 128;
    default: return 0;
  }
}

inline float bits_to_f32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16_to_f32(uint16_t v) { return bits_to_f32(static_cast<uint32_t>(v) << 16); }

// Round to nearest even, NaN kept quiet NaN: matches torch's float->bfloat16 conversion.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    v = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

// e4m3fn (OCP FP8): bias 7, no infinities, S.1111.111 is NaN, max 448.
inline float e4m3fn_to_f32(uint8_t b) {
  const uint32_t sign = b >> 7, exp = (b >> 3) & 0xF, man = b & 0x7;
  if (exp == 0xF && man == 0x7) return std::numeric_limits<float>::quiet_NaN();
  const float v = exp == 0 ? std::ldexp(static_cast<float>(man), -9)
                           : std::ldexp(static_cast<float>(man | 0x8), static_cast<int>(exp) - 10);
  return sign ? -v : v;
}

// e2m1 (FP4): magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; no NaN, so NaN poison can only show through the scales
// (an E8M0 0xFF or e4m3 0x7F scale decodes to NaN).
inline float e2m1_to_f32(uint8_t nibble) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kMag[nibble & 0x7];
  return (nibble & 0x8) ? -v : v;
}

// E8M0: 2^(e-127), 0xFF is NaN (OCP MX v1.0 section 5.4).
inline float e8m0_to_f32(uint8_t e) {
  if (e == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(e) - 127);
}

// One expert weight matrix set [E, N, K] in a given format. Pointers are borrowed: Python keeps the tensors.
struct Matrix {
  Format fmt = Format::kBF16;
  int64_t E = 0, N = 0, K = 0;
  const uint8_t* data = nullptr;
  const uint8_t* scales = nullptr;  // mxfp4/nvfp4: bytes; q4_0: fp16; block_fp8: float; bf16: unused
  const float* global_scale = nullptr;  // nvfp4 only: [E]

  int64_t row_bytes() const {
    switch (fmt) {
      case Format::kBF16: return K * 2;
      case Format::kMXFP4:
      case Format::kNVFP4:
      case Format::kQ4_0: return K / 2;
      case Format::kFP8Block: return K;
    }
    return 0;
  }

  void validate(const char* which) const {
    const std::string name(which);
    if (E <= 0 || N <= 0 || K <= 0) throw std::invalid_argument(name + ": E, N and K must be positive");
    if (!data) throw std::invalid_argument(name + ": data pointer is null");
    const int64_t kb = k_block(fmt);
    if (kb && fmt != Format::kFP8Block && K % kb != 0) {
      throw std::invalid_argument(name + ": K=" + std::to_string(K) + " must be a multiple of " +
                                  std::to_string(kb) + " for format " + format_name(fmt));
    }
    if (fmt != Format::kBF16 && !scales) {
      throw std::invalid_argument(name + ": format " + std::string(format_name(fmt)) + " needs scales");
    }
    if (fmt == Format::kNVFP4 && !global_scale) {
      throw std::invalid_argument(name + ": format nvfp4 needs a per-expert global scale");
    }
  }

  // Dequantize row n of expert e into out[K] (fp32).
  void dequant_row(int64_t e, int64_t n, float* out) const {
    const uint8_t* row = data + (e * N + n) * row_bytes();
    switch (fmt) {
      case Format::kBF16: {
        for (int64_t k = 0; k < K; ++k) {
          uint16_t v;
          std::memcpy(&v, row + 2 * k, 2);
          out[k] = bf16_to_f32(v);
        }
        return;
      }
      case Format::kMXFP4: {
        const uint8_t* s = scales + (e * N + n) * (K / 32);
        for (int64_t k = 0; k < K; k += 2) {
          const float scale = e8m0_to_f32(s[k / 32]);
          out[k] = e2m1_to_f32(row[k / 2] & 0xF) * scale;
          out[k + 1] = e2m1_to_f32(row[k / 2] >> 4) * scale;
        }
        return;
      }
      case Format::kNVFP4: {
        const uint8_t* s = scales + (e * N + n) * (K / 16);
        const float g = global_scale[e];
        for (int64_t k = 0; k < K; k += 2) {
          // quant.dequantize_nvfp4's association: value * (block scale * global scale).
          const float scale = e4m3fn_to_f32(s[k / 16]) * g;
          out[k] = e2m1_to_f32(row[k / 2] & 0xF) * scale;
          out[k + 1] = e2m1_to_f32(row[k / 2] >> 4) * scale;
        }
        return;
      }
      case Format::kQ4_0: {
        const uint8_t* ds = scales + (e * N + n) * (K / 32) * 2;
        for (int64_t b = 0; b < K / 32; ++b) {
          const uint8_t* blk = row + b * 16;
          uint16_t dbits;
          std::memcpy(&dbits, ds + 2 * b, 2);
          const float d = fp16_to_f32(dbits);
          for (int j = 0; j < 16; ++j) {
            out[b * 32 + j] = static_cast<float>(static_cast<int>(blk[j] & 0xF) - 8) * d;
            out[b * 32 + j + 16] = static_cast<float>(static_cast<int>(blk[j] >> 4) - 8) * d;
          }
        }
        return;
      }
      case Format::kFP8Block: {
        const int64_t nb = (N + 127) / 128, kb = (K + 127) / 128;
        const float* s = reinterpret_cast<const float*>(scales) + (e * nb + n / 128) * kb;
        for (int64_t k = 0; k < K; ++k) out[k] = e4m3fn_to_f32(row[k]) * s[k / 128];
        return;
      }
    }
  }
};

}  // namespace graphsafe::cpu_moe

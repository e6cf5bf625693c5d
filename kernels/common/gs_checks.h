// gs_checks.h -- dtype codes and argument checks shared by the pybind11 entry points (CPU and GPU).
//
// Role: every entry point refuses what it has no arm for BEFORE it reads a pointer, by throwing
// std::invalid_argument (pybind11 turns it into ValueError) with the op, the argument and the allowed
// values in the message. vllm.cpp#509: an f16 tensor that slipped past an IsFloat gate was read as f32,
// 4 bytes per 2-byte element, with no error anywhere. Host-only header (no device code).
#pragma once

#include <stdint.h>

#include <stdexcept>
#include <string>

// Dtype codes passed from Python (kernels/moe_combine/ops.py DTYPE_CODES keeps the same table). F16 has a code so that it can be
// named in the refusal; no kernel has an f16 arm.
enum GsDtype : int { GS_F32 = 0, GS_BF16 = 1, GS_F16 = 2 };

inline const char* gs_dtype_name(int code) {
  switch (code) {
    case GS_F32: return "f32";
    case GS_BF16: return "bf16";
    case GS_F16: return "f16";
    default: return "unknown";
  }
}

// Refuse anything but f32/bf16 for a storage argument.
inline void gs_require_f32_or_bf16(const char* op, const char* arg, int code) {
  if (code == GS_F32 || code == GS_BF16) return;
  throw std::invalid_argument(std::string(op) + ": " + arg + " has dtype " + gs_dtype_name(code) + " (code " +
                              std::to_string(code) + "); allowed: f32, bf16");
}

inline void gs_require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(op) + ": " + what);
}

// A pointer may be null only when nothing is read through it.
inline void gs_require_ptr(const char* op, const char* arg, uintptr_t ptr, int64_t elements) {
  gs_require(ptr != 0 || elements == 0, op, std::string(arg) + " is a null pointer but has elements");
}

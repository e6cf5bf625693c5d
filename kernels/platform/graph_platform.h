// graph_platform.h -- the entry points of the platform helpers, between their pybind11 layer
// (graph_platform.bind.cpp, host C++ built by g++) and their implementation (graph_platform.hip, nvcc/hipcc).
//
// Role: plain types only (pointers, sizes and streams as integers), so the binding layer needs no GPU runtime
// header and compiles beside the kernels instead of inside nvcc's pass (kernels/common/native.py,
// "Translation units"). Errors are thrown as std::runtime_error / std::invalid_argument, which pybind11 turns
// into RuntimeError / ValueError. What each one does and why: graph_platform.hip.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <utility>

namespace gs_platform {

uintptr_t slot_create(size_t n);
long long slot_host_calls(uintptr_t handle);
int slot_flag(uintptr_t handle);
void copy_roundtrip(uintptr_t handle, uintptr_t x, uintptr_t y, size_t n, uintptr_t stream);
void memset_async(uintptr_t ptr, int value, size_t bytes, uintptr_t stream);
int host_affine(uintptr_t handle, uintptr_t x, uintptr_t y, size_t n, uintptr_t stream, bool simulate_refusal);
void host_affine_at_enqueue(uintptr_t handle, uintptr_t x, uintptr_t y, size_t n, uintptr_t stream,
                            bool capturing);
int memop_affine(uintptr_t handle, uintptr_t x, uintptr_t y, size_t n, uintptr_t stream, uintptr_t memop_stream);
std::pair<uintptr_t, uintptr_t> cell_create();
void cell_set(uintptr_t host_cell, uintptr_t value);
void affine_indirect(uintptr_t dev_cell, uintptr_t y, size_t n, uintptr_t stream);
void illegal_address(uintptr_t stream);
void spin_until_flag(uintptr_t flag, double limit_s, uintptr_t timed_out, uintptr_t stream);
[[noreturn]] void hard_abort();
// The runtime's name and text of an error code (hipGetErrorName / hipGetErrorString).
std::string error_name(int code);
std::string error_string(int code);

}  // namespace gs_platform

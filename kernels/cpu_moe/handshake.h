// handshake.h -- the entry points of the GPU half of the CPU/hybrid MoE handshake, between its pybind11 layer
// (handshake.bind.cpp, host C++ built by g++) and its implementation (handshake.hip, nvcc/hipcc).
//
// Role: plain types only (pointers, sizes and streams as integers), so the binding layer needs no GPU runtime
// header and compiles beside the .hip instead of inside nvcc's pass (kernels/common/native.py, "Translation
// units"). Errors are thrown as std::runtime_error / std::invalid_argument (RuntimeError / ValueError in
// Python). What each one does and why: handshake.hip.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <map>
#include <string>
#include <utility>

namespace gs_handshake {

inline constexpr int kModeMemop = 0, kModeHostFn = 1;
inline constexpr int kFlagExplicitNodes = 1, kFlagInjectUnrecorded = 2;

void enqueue(uintptr_t stream_handle, int mode, int flags, uintptr_t d_hidden, uintptr_t d_ids, uintptr_t d_weights,
             uintptr_t d_out, uintptr_t h_hidden, uintptr_t h_ids, uintptr_t h_weights, uintptr_t h_out,
             size_t n_hidden, size_t n_ids, size_t n_weights, size_t n_out, uintptr_t req, uintptr_t done,
             uintptr_t host_fn, uintptr_t slot);
void enqueue_notify(uintptr_t stream_handle, int mode, int flags, uintptr_t d_hidden, uintptr_t d_ids,
                    uintptr_t d_weights, uintptr_t h_hidden, uintptr_t h_ids, uintptr_t h_weights, size_t n_hidden,
                    size_t n_ids, size_t n_weights, uintptr_t req, uintptr_t req_host);
void enqueue_wait(uintptr_t stream_handle, int mode, int flags, uintptr_t d_out, uintptr_t h_out, size_t n_out,
                  uintptr_t done, uintptr_t done_host);
// Addresses of the host functions post_req and await_done, by name.
std::map<std::string, uintptr_t> host_fns();
// (host address, device address) of `bytes` of zeroed mapped pinned memory.
std::pair<uintptr_t, uintptr_t> alloc_mapped(size_t bytes);
void free_mapped(uintptr_t host);
void copy(uintptr_t dst, uintptr_t src, size_t bytes, uintptr_t stream);
void sync(uintptr_t stream);
void mark_done(uintptr_t stream, uintptr_t word);
bool is_capturing(uintptr_t stream);

}  // namespace gs_handshake

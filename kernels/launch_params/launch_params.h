// launch_params.h -- the entry points of the launch-parameter kernels, between their pybind11 layer
// (launch_params.bind.cpp, host C++ built by g++) and their implementation (launch_params.hip, nvcc/hipcc).
//
// Role: plain types only (pointers and streams as integers), as kernels/platform/graph_platform.h. Each entry
// launches one kernel whose launch carries a value a host plan could freeze into a captured graph; what each
// one does and why: launch_params.hip. Errors are thrown as std::runtime_error / std::invalid_argument.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace gs_launch {

constexpr int kRowsPerBlock = 4;  // scale_valid_rows: rows one block handles (its grid is rows / 4)

void kv_append(uintptr_t cache, uintptr_t new_row, uintptr_t out, int rows, int dim, int pos, uintptr_t pos_dev,
               uintptr_t stream);
void scale_valid_rows(uintptr_t x, uintptr_t out, int cols, uintptr_t n_valid_dev, int grid, uintptr_t stream);
void run_plan(uintptr_t x, uintptr_t out, int cols, uintptr_t plan_rows, int work_items, uintptr_t work_items_dev,
              int grid, uintptr_t stream);
void apply_fixup(uintptr_t out, int rows, int cols, uintptr_t needed_dev, uintptr_t stream);
void sample_rows(uintptr_t probs, uintptr_t out, int rows, int vocab, uintptr_t uniforms, uint64_t seed,
                 uint64_t offset, uintptr_t stream);
// The uniform draw sample_rows makes for (seed, offset, row) without `uniforms`, computed on the host: the
// CPU implementation draws the same numbers.
float philox_uniform(uint64_t seed, uint64_t offset, uint32_t row);

}  // namespace gs_launch

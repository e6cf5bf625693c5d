// gs_formats.h -- the weight formats' numeric codes, one table for every kernel and its CPU twin.
//
// The Python side hands a format to C++ as one of these ints; kernels/common/quant.py FORMAT_CODES is the same
// table (tests/test_quant.py parses this enum and compares). A kernel that supports a subset refuses the other
// codes by name. Layouts of each format: kernels/common/quant.py's module note.
#pragma once

enum GsFormat : int {
  GS_FMT_BF16 = 0,
  GS_FMT_MXFP8 = 1,
  GS_FMT_FP8_FNUZ = 2,
  GS_FMT_BLOCK_FP8 = 3,
  GS_FMT_MXFP4 = 4,
  GS_FMT_NVFP4 = 5,
  GS_FMT_Q4_0 = 6,
};
#define GS_FORMAT_NAMES "0 bf16, 1 mxfp8, 2 fp8_fnuz, 3 block_fp8, 4 mxfp4, 5 nvfp4, 6 q4_0"

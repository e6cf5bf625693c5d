// cpu_moe.bind.cpp -- the Python module of the CPU expert executor: pybind11 over cpu_moe.h.
//
// Role: argument conversion, GIL releases and the names Python sees; the work is in cpu_moe.cpp. Its own
// translation unit so that g++ compiles pybind11 at the same time as the math (kernels/common/native.py,
// "Translation units").
#include <pybind11/pybind11.h>

#include <string>

#include "cpu_moe.h"

namespace py = pybind11;

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
    dequant_rows(mat, ptr<float>(out));
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
      .def("release_if_requested",
           [](Executor& ex, int i) {
             // Only a posted request nobody took (req == 1): req 1 -> 0 first, so the service never answers
             // it later, then done := 1 for the waiter. An idle slot is left alone: done := 1 there would
             // answer the slot's NEXT wait at once, and every later call would read the call before it.
             Slot& s = ex.slot(i);
             uint32_t expected = 1;
             if (!__atomic_compare_exchange_n(s.req, &expected, 0u, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
               return false;
             store_release(s.done, 1);
             return true;
           },
           "Watchdog for waits of any executor: answer slot i's wait only if its request was posted and not "
           "taken; returns whether it did.")
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

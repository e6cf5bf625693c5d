import ctypes, time, sys, torch

lib = ctypes.CDLL(sys.argv[1])
n = 16 << 20
a = torch.randn(n)
b = a * (1 + 1e-7)
res = (ctypes.c_float * 3)()
f = lib.graphsafe_scan_floats_host
f.argtypes = [
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_longlong,
    ctypes.c_int,
    ctypes.POINTER(ctypes.c_float),
]
for _ in range(3):
    f(a.data_ptr(), b.data_ptr(), n, 0, res)
t = time.perf_counter()
for _ in range(10):
    f(a.data_ptr(), b.data_ptr(), n, 0, res)
ms = (time.perf_counter() - t) / 10 * 1e3
d = torch.empty_like(a)
t = time.perf_counter()
for _ in range(10):
    d.copy_(a)
cms = (time.perf_counter() - t) / 10 * 1e3
print(f"scan {ms:.2f} ms, copy {cms:.2f} ms, ratio(bw) {(2 * 64 / ms) / (2 * 64 / cms):.2f}", list(res))

"""Run one registered case in this process with a traceback dump of every thread after DUMP_S seconds
(faulthandler), so a hang shows where it stands. Usage: python diag_hang.py CASE_MODULE CASE_NAME [DUMP_S]"""

import faulthandler
import importlib
import sys
import time

import harness

module, name = sys.argv[1], sys.argv[2]
dump_s = float(sys.argv[3]) if len(sys.argv) > 3 else 40
faulthandler.dump_traceback_later(dump_s, repeat=True)
importlib.import_module(module)
case = harness.REGISTRY.get(name)
start = time.perf_counter()
result = harness.check(case, backend="gpu")
print(name, result.verdict, f"{time.perf_counter() - start:.2f} s")
for row in result.rows:
    print(" ", row.verdict, (row.detail or "")[:300])

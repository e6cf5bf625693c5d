"""The built-in suite: every module in this package registers its cases at import (harness.case.load_builtin_suite).

One module per op family; `counterexamples/` reproduces public issues as buggy/fixed pairs; `platform/`
checks the graph runtime itself.
"""

"""The built-in suite: every module in this package registers its cases at import.

graphsafe.suites loads it when a run names no case source: [tool.graphsafe] default-suites in pyproject.toml
names it for a checkout, the graphsafe.suites entry point for an installed graphsafe.

One module per op family; `counterexamples/` reproduces public issues as buggy/fixed pairs; `platform/`
checks the graph runtime itself.
"""

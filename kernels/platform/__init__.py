"""The platform op family: graph_platform.hip and its torch ops (ops.py; importing it registers
graphsafe_platform::*), one op per graph-runtime behaviour the platform conformance cases check. GPU only."""

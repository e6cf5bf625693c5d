"""The launch-parameter op family: launch_params.hip (kernels whose launch carries a value a host plan may freeze
into a captured graph) and ops.py (launchers, a host plan, and the sampling op `graphsafe_launch_params::sample_rows`
on CPU and CUDA). The kernels are GPU only; the sampling op also runs on the CPU."""

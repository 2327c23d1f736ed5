"""The built-in (no-LLM) policy: capture Model.forward as an ATen graph, partition it into
pointwise / row-reduction kernels (plus library GEMM/conv where allowed), render them from
C++/OpenMP or CUDA templates with a TUNE space, and let the evaluator and the tuner judge them.

capture (child process: the only place the problem's code runs) -> graph (normalize) ->
plan (kernels) -> emit_cpu / emit_cuda (sources) -> program (the candidate file) ->
driver (the policy's steps as tool calls of the ordinary agent loop).
"""

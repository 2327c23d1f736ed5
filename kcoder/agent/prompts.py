"""The prompts: system prompt (rules, tools, skill listing), task prompt, fixed replies."""

from __future__ import annotations

OBSERVATION_PREFIX = "Observation from "

_CANDIDATE_CUDA = """\
The candidate is ONE self-contained Python file, model_new.py, defining
`class ModelNew(nn.Module)` with the same constructor arguments as the reference Model.
It builds its kernels at import time with
`torch.utils.cpp_extension.load_inline(name=..., cpp_sources=[<torch binding>],
cuda_sources=[<CUDA kernels and launchers>], functions=[...], extra_cuda_cflags=["-O3"])`
and forward() calls them. Keep torch out of cuda_sources: kernels plus launchers that take raw
pointers, sizes and a cudaStream_t and return cudaError_t; cpp_sources holds the binding (checks,
device guard, allocation, the current stream, C10_CUDA_CHECK on the launcher's result).
kcoder then builds that CUDA unit without the torch headers and reuses the unchanged binding
between turns (seconds instead of a minute), and the file still builds with plain load_inline.
Launch on the current stream; never create streams or threads."""

_CANDIDATE_CPU = """\
The target device is the CPU. The candidate is ONE self-contained Python file, model_new.py,
defining `class ModelNew(nn.Module)` with the same constructor arguments as the reference
Model. It builds C++ kernels at import time with
`torch.utils.cpp_extension.load_inline(name=..., cpp_sources=[<C++ code>], functions=[...],
extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])` (no CUDA sources) and
forward() calls them."""

_RULES = """\
Rules the evaluator enforces (a candidate that breaks one is rejected, whatever its speed):
- Inside ModelNew.forward, torch compute ops are refused, from Python and from C++ (ATen):
  only allocation (torch.empty, empty_like, ...) and views are allowed. {allow_line}
- Outputs must match the reference on several fresh input sets: same shape, dtype, device,
  values within dtype-aware tolerances, NaN/Inf where the reference has them; inputs must
  not be modified. Precision policy: {precision}.
- No extra streams or threads, no caching of outputs, no try/except fallbacks, no patching
  timers, no reading model.py or its outputs.
- The candidate runs in a sandbox with no network and no secrets in its environment; it must
  not open or write files, start processes, read /proc, or reach into Python objects from C++.
  Its reported times are cross-checked by the evaluator's own clock.
- Parameters: keep the reference's parameter/buffer names and shapes so its state dict loads."""

_PROCESS = """\
How the run works:
- You act only through the tools. The workspace holds model.py (the reference, read-only)
  and model_new.py (your candidate). compile, verify and benchmark run kcoder's evaluator
  on model_new.py in a fresh process and report its verdict.
- Success is decided by the evaluator, not by you: the run succeeds when a benchmark
  verdict shows the candidate correct and at least {target:.2f}x as fast as torch.compile.
  The best verified candidate is kept automatically.
- Work in small verified steps: write, compile, verify, benchmark. Before each change,
  state in one sentence what you expect it to gain and why.
- Call finish only when you cannot improve further; it ends the run, it does not pass it."""

_TEXT_PROTOCOL = """\
Tool calls: this conversation has no native tool calling. To call a tool, end your reply
with exactly one fenced block like this (JSON, strings escaped as in JSON):

```tool
{{"name": "read_file", "arguments": {{"path": "model.py"}}}}
```

The result comes back in the next message, starting with "{prefix}<tool>".
Available tools:
{tools}"""


def system_prompt(*, device: str, target: float, allow: list[str], precision: str,
                  skills_listing: str, tool_mode: str, tools_text: str = "") -> str:
    """The system prompt. `skills_listing` holds only names and descriptions."""
    allow_line = ("Library calls allowed by the user: " + ", ".join(allow) + "."
                  if allow else "No GEMM/conv library calls (cuBLAS, cuDNN) are allowed.")
    parts = [
        ("You are kcoder, an expert performance engineer. Your job: make the PyTorch module in "
        "model.py faster by writing custom kernels, proven correct and fast by kcoder's evaluator."),
        _CANDIDATE_CPU if device == "cpu" else _CANDIDATE_CUDA,
        _RULES.format(allow_line=allow_line,
                      precision="strict fp32" if precision == "strict" else "relaxed (TF32/bf16)"),
        _PROCESS.format(target=target),
    ]
    if skills_listing:
        parts.append("Skills (load one with load_skill before the work it describes; start with "
                     "the main workflow):\n" + skills_listing)
    if tool_mode == "text":
        parts.append(_TEXT_PROTOCOL.format(prefix=OBSERVATION_PREFIX, tools=tools_text))
    return "\n\n".join(parts)


def sol_note(figures: dict) -> str:
    """How much room there is: the reference's baselines and its speed of light (the
    roofline preflight's figures, agent/preflight.py)."""
    compile_us = figures.get("compile_us")
    lines = [f"Measured before the run (this device, the evaluator's timing): eager "
             f"{figures['eager_us']:,.1f} us" + (f", torch.compile {compile_us:,.1f} us." if compile_us else ".")]
    if figures.get("sol_us"):
        flops = figures.get("flops")
        lines.append(
            f"Speed of light (SOL): {figures['sol_us']:,.1f} us, {figures['sol_bound']}-bound: the reference "
            f"moves at least {(figures.get('min_bytes') or 0) / 1e6:,.2f} MB (inputs, weights, outputs) and "
            f"does {'an uncounted number of' if flops is None else f'{flops / 1e9:,.3g} G'} matmul/conv FLOPs; "
            f"ceilings: {figures['sol_ceilings']}. No kernel can be faster than the SOL.")
    if figures.get("compile_headroom"):
        lines.append(f"So at most {figures['compile_headroom']:.2f}x over torch.compile is possible: spend effort "
                     "where the gap to the SOL is large.")
    return "\n".join(lines)


# The cuda-agent profile speaks the CUDA Agent environment's commands through `bash`.
CUDA_AGENT_NOTE = """\
In this environment the bash tool maps `bash utils/compile.sh` to compile,
`python3 -m utils.verification` to verify and `python3 -m utils.profiling` to benchmark;
there is no other shell. The candidate is the single file model_new.py (no kernels/ folder,
no binding.cpp): put the CUDA sources in load_inline inside it."""

CHAT_NOTE = """\
This is an interactive session: the user sends requests one at a time. Work on the current
request with the tools. When it is done, or when you need the user's answer, reply with
plain text and no tool call: that hands the turn back to the user (finish does too). The
user can also run the evaluator; its verdicts are quoted in their messages. Be brief."""


def task_prompt(reference_source: str, device: str) -> str:
    """The first user message: the problem itself."""
    return (f"Optimize this module for the {device} target. The reference, model.py:\n\n"
            f"```python\n{reference_source.rstrip()}\n```\n\n"
            "Begin by loading the main workflow skill, then analyze the module and write "
            "model_new.py.")


def chat_task(reference_source: str, device: str) -> str:
    """The opening of a chat's first user message: the problem, then the user's request."""
    return (f"We are optimizing this module for the {device} target. The reference, model.py:"
            f"\n\n```python\n{reference_source.rstrip()}\n```\n\nThe candidate is model_new.py in "
            "the workspace. The user's request:\n\n")


def observation_message(tool: str, text: str) -> str:
    """How one tool result reads in the text protocol (a user message)."""
    return f"{OBSERVATION_PREFIX}{tool}:\n{text}"


NO_TOOL_CALL = ("Your reply contained no tool call. Every reply must call one of the tools "
                "(benchmark measures the candidate; finish ends the run).")
TEXT_NO_TOOL_CALL = NO_TOOL_CALL + (" Write it as a fenced ```tool block holding "
                                    '{"name": ..., "arguments": {...}}.')
RESUMED = ("This run was stopped and has now been resumed. The workspace is as you left it; "
           "continue from where you were (list_files or read_file show the current state).")
NOT_RUN = "Not run: the run ended before this call was executed."

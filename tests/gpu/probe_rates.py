"""Plain CUDA-event times of an example's eager, torch.compile and hand solution, on one input
set repeated (warm L2) and on input sets rotated past the L2 (cold), to set beside the judge's
figures: `python3 tests/gpu/probe_rates.py examples/elementwise_chain [CANDIDATE.py ...]` (builds its
solution and each candidate). "host" is the launching loop's own wall time per call, before the
synchronize: a figure near the event time means the candidate is bound by its Python/binding work."""

import importlib.util
import sys
import time

import torch


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def time_us(fn, sets, calls=200):
    with torch.no_grad():
        for i in range(20):
            fn(*sets[i % len(sets)])
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        host = time.perf_counter()
        for i in range(calls):
            fn(*sets[i % len(sets)])
        host = time.perf_counter() - host
        end.record()
        torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / calls, host * 1e6 / calls


def main(folder, candidates):
    import torch.utils.cpp_extension as ext

    from kcoder.build.inline import make_load_inline

    # kcoder's builds: one folder per distinct source (the policy's candidates share a module name)
    ext.load_inline = make_load_inline(ext.load_inline)
    problem = load(f"{folder}/model.py", "probe_problem")
    solution = load(f"{folder}/solution_cuda.py", "probe_solution")
    torch.manual_seed(0)
    model = problem.Model(*problem.get_init_inputs()).cuda().eval()
    new = solution.ModelNew(*problem.get_init_inputs()).cuda().eval()
    new.load_state_dict(model.state_dict(), strict=False)
    compiled = torch.compile(model)
    one = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
    nbytes = sum(x.numel() * x.element_size() for x in one if isinstance(x, torch.Tensor))
    count = max(2, int(4 * 50e6 // max(nbytes, 1)) + 1)  # past four L2s
    sets = [[x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()] for _ in range(count)]
    impls = [("eager", model), ("compile", compiled), ("hand", new)]
    for k, path in enumerate(candidates):
        cand = load(path, f"probe_candidate_{k}").ModelNew(*problem.get_init_inputs()).cuda().eval()
        cand.load_state_dict(model.state_dict(), strict=False)
        impls.append((path.rsplit("/", 1)[-1][:-3], cand))
    for name, fn in impls:
        (warm, host), (cold, _) = time_us(fn, [one]), time_us(fn, sets)
        label = folder.rstrip("/").split("/")[-1]
        print(f"RATE {label:20s} {name:18s} warm {warm:7.1f} us cold {cold:8.1f} us ({count} sets) host {host:6.1f} us")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

"""Reference process: the judge's hands. It never loads the candidate.

Run as `python -m kcoder.evaluate.reference.server JOB.json`, with stdin/stdout connected to the
judge (channel.py). It builds Model from the problem file with the evaluation's seed, hands
its weights and constructor arguments to the candidate's process as files, computes
reference outputs for the input sets the judge names (by seed), compares the candidate's
saved outputs against them, and times the baselines (eager, torch.compile) while no
candidate process is alive. Memory scales with one input set: nothing outlives a request
but the model.
"""

from __future__ import annotations

import faulthandler
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from kcoder.build import inline as build
from kcoder.evaluate.harness.channel import Link
from kcoder.evaluate.harness.loading import file_traceback, first_line, load_module, set_precision
from kcoder.evaluate.options import EvalOptions
from kcoder.evaluate.reference.timedops import TimedOps
from kcoder.evaluate.reference.timedops import save_new as _save_new
from kcoder.hostinfo import cpu_model, cuda_device
from kcoder.trust import UnsafeFile, open_plain, remove_plain, writing_whole


class ProblemFault(Exception):
    """The user's problem file failed (its Model, get_inputs or forward)."""


class ReferenceServer(TimedOps):
    def __init__(self, job: dict[str, Any], link: Link) -> None:
        self.job, self.link = job, link
        self.options = EvalOptions.from_dict(job["options"])
        self.device = self.options.device
        self.problem_path = Path(job["problem"])
        self.fingerprints: set[str] = set()
        self.compiled: Any = None
        self.flush_bytes = 0
        self.flush_buffer: Any = None
        self.gate: Any = None  # batchrun.DeviceGate, on the GPU
        self.warmed: set[str] = set()  # the implementations that ran their un-timed first calls
        self.last_batch: Any = None  # the last timed batch (its outputs kept until the next request)
        self.arena: Any = None  # arenaprep.Arena: every arena batch's inputs and outputs (the cpu target)
        self.own_arena: Any = None  # this process's own mapping of it (harness/arena.py)
        self.cand_batch: dict[str, Any] | None = None  # the candidate's last arena batch, until the next
        self.cand_mapped: tuple[int, int] | None = None  # (process, arena) the candidate's process has mapped
        self.output_tree: Any = None  # the output's shapes and dtypes, laid out in a slot (arena batches)
        self.initial_state: dict[str, Any] | None = None  # Model's own state, while the judge's draw is loaded
        self.held: Any = None  # what the last arena batch ran, freed when the next one is made
        self.stamps = {"main": time.time()}  # wall-clock start-up stamps (stagetimes.py)
        share_fd = job.get("handoff_fd")  # candidates' outputs arrive here by descriptor (handoff.py)
        self.share = socket.socket(fileno=share_fd) if isinstance(share_fd, int) else None

    def start(self) -> dict[str, Any]:
        notes = build.prepare_environment(self.device)
        import torch

        self.torch = torch
        set_precision(torch, self.options.precision)
        self.stamps["torch"] = time.time()
        info: dict[str, Any] = {"torch_version": torch.__version__, "notes": notes, "stamps": self.stamps}
        if self.device == "cuda":
            if not torch.cuda.is_available():
                raise ProblemFault("--device cuda asked for, but torch sees no CUDA GPU here")
            info["device_name"] = cuda_device(torch)
            info["device_memory_mb"] = torch.cuda.get_device_properties(0).total_memory / 2**20
        else:
            info["device_name"] = cpu_model()
        self._load_problem()
        self.stamps["loaded"] = time.time()
        info.update(self._first_run())
        self.stamps["first"] = time.time()
        return info

    def _load_problem(self) -> None:
        torch = self.torch
        try:
            self.problem = load_module(self.problem_path, "kcoder_reference_problem")
            init = self.problem.get_init_inputs()
            if not isinstance(init, (list, tuple)):
                raise TypeError(f"get_init_inputs() returned {type(init).__name__}, expected a list")
            torch.manual_seed(self.options.seed)
            self.model = self.problem.Model(*init).to(self.device)
        except Exception as exc:
            raise self._fault(exc) from None
        try:
            self._hand_over(list(init), "init")
        except UnsafeFile:
            raise
        except Exception as exc:
            raise ProblemFault(f"get_init_inputs() must return plain values (numbers, lists, tensors): "
                               f"{first_line(exc)}") from None
        state = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        self._hand_over(state, "weights")

    def _hand_over(self, value: Any, name: str) -> None:
        """Save the constructor arguments or weights for the candidate; a session's reference
        (`keep_dir`) first saves them in a folder of the judge's, which no candidate can reach,
        for the next candidates (op_reset): as they were before any forward pass."""
        keep = self.job.get("keep_dir")
        if not keep:
            _save_new(self.torch, value, self.job[f"{name}_path"])
            return
        _save_new(self.torch, value, str(Path(keep) / f"{name}.pt"))
        _copy_whole(Path(keep) / f"{name}.pt", self.job[f"{name}_path"])

    def _fault(self, exc: BaseException) -> ProblemFault:
        where, _ = file_traceback(exc, str(self.problem_path))
        return ProblemFault(f"the problem file failed{where}: {first_line(exc)}")

    def inputs(self, seed: int, rows: int | None = None) -> list[Any]:
        """Input set `seed`; at batch size `rows` when given (drawnshapes.py)."""
        from kcoder.evaluate.harness.verify import batch_inputs, make_inputs

        try:
            if rows:
                return batch_inputs(self.problem, seed, self.device, rows)
            return make_inputs(self.problem, seed, self.device)
        except Exception as exc:
            raise self._fault(exc) from None

    def call_inputs(self, seed: int, batch: dict[str, Any] | None, rows: int | None = None) -> list[Any]:
        """Input set `seed`, as call `batch["call"]` of a timed batch saw it when `batch` is given
        (the key's factors replayed: batchrun.perturbed); at batch size `rows` when given."""
        if rows:
            return self.inputs(seed, rows)
        inputs = self.inputs(seed)
        if not batch:
            return inputs
        from kcoder.evaluate.harness.batchrun import perturbed

        return perturbed(self.torch, inputs, int(batch["key"]), int(batch["n"]), int(batch["call"]), self.device)

    def reference(self, seed: int, batch: dict[str, Any] | None = None, rows: int | None = None) -> Any:
        inputs = self.call_inputs(seed, batch, rows)
        try:
            with self.torch.no_grad():
                out = self.model(*inputs)
        except Exception as exc:
            raise self._fault(exc) from None
        del inputs
        return out

    def _first_run(self) -> dict[str, Any]:
        """One reference call: its own peak memory and the one-input-set footprint."""
        from kcoder.evaluate.harness.verify import flatten_outputs

        torch = self.torch
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        from kcoder.evaluate.harness.verify import batch_positions

        inputs = self.inputs(self.options.seed)
        in_bytes, scaled = _nbytes(inputs), batch_positions(inputs)
        batch = int(inputs[scaled[0]].shape[0]) if scaled else 0
        del inputs
        out = self.reference(self.options.seed)
        out_bytes = sum(t.nbytes for _, t in flatten_outputs(out) if isinstance(t, torch.Tensor))
        info = {"footprint_mb": (in_bytes + 2 * out_bytes) / 2**20, "output_mb": out_bytes / 2**20, "batch": batch}
        if self.device == "cuda":
            torch.cuda.synchronize()
            info["reference_peak_mb"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        del out
        self._release()
        return info

    # --- requests -----------------------------------------------------------------------------
    def serve(self) -> None:
        while (request := self.link.receive()) is not None:
            op = request.pop("op", "")
            try:
                self.link.reply(**getattr(self, f"op_{op}")(**request))
            except ProblemFault as exc:
                self.link.reply(problem=str(exc))
            except Exception as exc:  # kcoder's own failure (its OOM included): an evaluation error
                self.link.reply(error=f"{op}: {first_line(exc)}")
            if op != "batch":
                self.last_batch = None  # a batch's outputs live until the next request only
            self._release()

    def op_check(self, seed: int, path: str, label: str, batch: dict[str, Any] | None = None,
                 shared: dict[str, Any] | None = None, commitment: list[int] | None = None,
                 rows: int | None = None) -> dict[str, Any]:
        """Compare the candidate's output for input set `seed` (as call `batch` of a timed batch
        saw it) with the reference's: `shared` (its layout) when it came by descriptor, else
        saved at `path`. With `commitment`, its bytes must also be the bytes the candidate's
        process committed to before the judge's clock stopped (batchrun.py)."""
        from kcoder.evaluate.harness.batchrun import commitments

        ref = self.reference(seed, batch, rows)
        try:
            out = self._candidate_output(path, shared, ref)
        except Exception as exc:
            return {"ok": False, "reason": f"{label}: the candidate's output could not be read back "
                                           f"({first_line(exc)[:120]})"}
        finally:
            remove_plain(path)
        if commitment is not None and commitments(self.torch, out) != commitment:
            return {"ok": False, "reason": f"integrity: {label}: the output handed over is not the one its process "
                                           "committed to before the judge's clock stopped (written late, on "
                                           "another stream, or computed when read)"}
        return self._compare(out, ref, seed, batch, rows)

    def _compare(self, out: Any, ref: Any, seed: int, batch: dict[str, Any] | None,
                 rows: int | None = None) -> dict[str, Any]:
        """The candidate's output against the reference's: the float32 tolerance, else the float64 rule."""
        from kcoder.evaluate.reference.compare import Mismatch, compare_outputs

        rule = ""  # the float32 tolerance accepted it; else the note of the rule that did
        try:
            stats = compare_outputs(out, ref, self.options.precision)
        except Mismatch as exc:
            from kcoder.evaluate.reference.compare64 import second_opinion

            try:  # the float64 rule, for float32 values only (compare64.py)
                stats, rule = second_opinion(exc, out, ref, lambda: self.reference_float64(seed, batch, out, rows),
                                             self.options.precision)
            except Mismatch as final:
                return {"ok": False, "mismatch": str(final)}
        self.fingerprints.add(_fingerprint(ref))
        return {"ok": True, "stats": stats.__dict__, "rule": rule}

    def reference_float64(self, seed: int, batch: dict[str, Any] | None, out: Any, rows: int | None = None) -> Any:
        """Model run in float64 on the upcast inputs and weights of input set `seed` (only
        when the float32 tolerance refused an output, and within compare64.MAX_BYTES)."""
        from kcoder.evaluate.harness.verify import flatten_outputs
        from kcoder.evaluate.reference.compare64 import MAX_BYTES, Float64Unavailable, float64_model, upcast
        torch = self.torch
        inputs = self.call_inputs(seed, batch, rows)
        out_bytes = sum(t.nbytes for _, t in flatten_outputs(out) if isinstance(t, torch.Tensor))
        need = 2 * (_nbytes(inputs) + out_bytes)
        if need > MAX_BYTES:
            raise Float64Unavailable(f"its inputs and outputs would take {need / 2**30:.1f} GiB in float64 "
                                     f"(the rule's cap is {MAX_BYTES / 2**30:.0f} GiB)")
        try:
            with torch.no_grad():
                return float64_model(self.model)(*upcast(inputs))
        except Exception as exc:  # an op without float64, out of memory: the float32 rule stands
            raise Float64Unavailable(f"Model's float64 run failed ({first_line(exc)[:120]})") from None

    def _candidate_output(self, path: str, shared: dict[str, Any] | None, ref: Any) -> Any:
        if shared is None:
            # Read, never mmap: the candidate's process could truncate a mapped file (SIGBUS here).
            # A regular file only, no link followed: the folder is the candidate's to write.
            with open_plain(path) as fh:
                return self.torch.load(fh, weights_only=True, map_location=self.device)
        from kcoder.evaluate.harness.handoff import receive_output
        from kcoder.evaluate.harness.verify import flatten_outputs

        ref_bytes = sum(t.nbytes for _, t in flatten_outputs(ref) if isinstance(t, self.torch.Tensor))
        return receive_output(self.share, shared, ref_bytes, self.device)

    def op_notes(self) -> dict[str, Any]:
        """What the checks could not tell: degenerate problems."""
        from kcoder.evaluate.reference.compare import zeros_would_pass

        notes = []
        if len(self.fingerprints) == 1:
            notes.append("degenerate problem: the reference output is identical for every input set; "
                         "correctness was decided by the relative-norm check")
        if zeros_would_pass(self.reference(self.options.seed), self.options.precision):
            notes.append("degenerate problem: an all-zeros answer is within tolerance of the reference")
        return {"notes": notes}

    def op_reset(self, init_path: str, weights_path: str) -> dict[str, Any]:
        """A session's next candidate (session.py): nothing of the last evaluation's checks is
        kept (fingerprints, peak memory, descriptors left unread), and the constructor
        arguments and weights are handed over again into that candidate's hand-off folder."""
        keep = self.job.get("keep_dir")
        if not keep:
            raise RuntimeError("this reference process keeps no hand-off files (not a session's)")
        self.fingerprints.clear()
        self._drop_arena()
        self.op_restore_weights()  # an earlier candidate's evaluation may have ended with the judge's draw loaded
        if self.share is not None:
            from kcoder.evaluate.harness.handoff import drain

            drain(self.share)
        if self.device == "cuda":
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()
        _copy_whole(Path(keep) / "init.pt", init_path)
        _copy_whole(Path(keep) / "weights.pt", weights_path)
        return {"reset": True}

    def op_peak(self) -> dict[str, Any]:
        """Peak device memory of this process, without the baselines' fixed L2-flush buffer."""
        if self.device != "cuda":
            return {"peak_mb": 0.0}
        fixed = self.flush_bytes
        return {"peak_mb": (self.torch.cuda.max_memory_allocated() - fixed) / 2**20}

    def op_sol(self) -> dict[str, Any]:
        """The speed of light of one reference call (evaluate/sol.py) and the physical floor
        (evaluate/floor.py); the device's ceilings are measured here the first time (asked
        while no candidate process is alive)."""
        from kcoder.device_limits import limits_for
        from kcoder.evaluate.reference.floor import floor_figures
        from kcoder.evaluate.reference.sol import count_work, own_size_rate, speed_of_light

        try:
            work = count_work(self.torch, self.model, self.inputs(self.options.seed))
            limits, _ = limits_for(self.torch, self.device)
            own = own_size_rate(self.torch, self.device, limits, work["min_bytes"])  # data in L2 is faster
            figures = speed_of_light(work, limits, self.options.precision, own)
        except Exception as exc:  # information only: never the evaluation's failure
            return {"sol_error": first_line(exc)[:200]}
        try:
            figures.update(floor_figures(self.torch, self.model, self.inputs, self.options.seed, limits,
                                         work["min_bytes"], own))
        except Exception as exc:  # no floor: nothing is refused for its time
            figures["floor_error"] = first_line(exc)[:200]
        return figures

    def _release(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.empty_cache()



def _copy_whole(source: Path, path: str) -> None:
    """Copy a kept hand-off file to `path`, written whole (no link there followed)."""
    import shutil

    with open_plain(source) as src, writing_whole(path) as fh:
        shutil.copyfileobj(src, fh, 2**22)


def _nbytes(values: list[Any]) -> int:
    import torch

    return sum(v.nbytes for v in values if isinstance(v, torch.Tensor))


def _fingerprint(out: Any) -> str:
    """A cheap summary of an output's values (shape, dtype, sums) to spot constant references."""
    import torch

    from kcoder.evaluate.harness.verify import flatten_outputs

    parts = []
    for _, leaf in flatten_outputs(out):
        if isinstance(leaf, torch.Tensor):
            leaf = torch.view_as_real(leaf) if leaf.is_complex() else leaf
            total = leaf.detach().sum(dtype=torch.float64).item() if leaf.numel() else 0.0
            ends = leaf.flatten()[[0, -1]].tolist() if leaf.numel() else []
            parts.append(f"{tuple(leaf.shape)}/{leaf.dtype}/{total:.9g}/{ends}")
        else:
            parts.append(repr(leaf))
    return "|".join(parts)


def main() -> None:
    link = Link()
    faulthandler.enable()
    job = json.loads(Path(sys.argv[1]).read_text())
    server = ReferenceServer(job, link)
    try:
        link.reply(**server.start())
    except ProblemFault as exc:
        link.reply(problem=str(exc))
    except Exception as exc:
        link.reply(error=f"start: {first_line(exc)}")
    else:
        server.serve()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

"""The candidate's process's side of the judge's batches and of its draws of weights: a part of
CandidateServer (worker.py) kept apart. Untrusted like the rest of this process: the GPU's batches
commit their outputs (batchrun.py), the cpu's run in arenas the reference process reads after
this process was frozen (harness/arena.py), and nothing here is evidence of anything.
"""

from __future__ import annotations

from typing import Any

from kcoder.evaluate.harness.loading import first_line


class Failure(Exception):
    """The candidate failed; `stage`, `reason` (one line) and `log` travel to the judge."""

    def __init__(self, stage: str, reason: str, log: str = "") -> None:
        super().__init__(reason)
        self.stage, self.reason, self.log = stage, reason, log


class HarnessFault(Exception):
    """kcoder's own step failed here (inputs, saving an output): not the candidate's fault."""


def copy_weights(ref_state: dict[str, Any], new: Any) -> None:
    """Copy the reference's parameters and buffers into ModelNew where name and shape match."""
    new_state = new.state_dict()
    shared = {k: v for k, v in ref_state.items() if k in new_state and new_state[k].shape == v.shape}
    new.load_state_dict(shared, strict=False)


class BatchOps:
    """Requests of CandidateServer's (it provides torch, device, model, link, outbox, clock,
    inputs(), _call(), _integrity(), _save())."""

    torch: Any
    device: str
    model: Any
    link: Any
    outbox: Any
    batch_run: Any
    last: Any

    def op_gate(self) -> dict[str, Any]:
        """The gate page (judgeclock.GatePage) the judge sent over the hand-off socket."""
        from kcoder.evaluate.harness.batchrun import GateError, open_gate

        try:
            self.gate = open_gate(self.torch, self.outbox.sock)
        except (GateError, OSError) as exc:
            raise HarnessFault(f"the gate page: {first_line(exc)}") from None
        return {"gate": True}

    def op_batch(self, seed: int, n: int, calibration: bool = False, generation: int = 0,
                 impl: str = "") -> dict[str, Any]:
        """n calls timed by the judge's own clock (batchrun.py, judgeclock.py); each call's
        output committed before "done" and kept until the next batch for the judge's drawn
        checks. `calibration`: a module that computes nothing stands in for the candidate."""
        from kcoder.evaluate.harness import batchrun
        from kcoder.evaluate.harness.timing import flush_l2

        self.batch_run, self.last = None, None
        base, model = self.inputs(seed), self.model
        if calibration:  # its figure only ever lowers what is taken off (judgeclock: the smaller one)
            with self.torch.no_grad():
                template = batchrun.calibration_template(self.torch, self._call(base, "timing"))
                model = batchrun.calibration_module(self.torch, template)
        flush = (lambda: flush_l2(self.clock.flush_buffer)) if self.device == "cuda" else None
        run = batchrun.BatchRun(self.torch, self.device, model, base, n, keep=not calibration, flush=flush)
        try:
            sums = batchrun.serve_batch(self.link, run, getattr(self, "gate", None), generation,
                                        lambda fn: self._call(fn, "timing", direct=True), "run")
        except batchrun.GateError as exc:
            raise HarnessFault(str(exc)) from None
        self._integrity("timing", "a batch")
        self.batch_run = None if calibration else run
        return {"done": True, "commitments": sums}

    def op_load_weights(self, path: str) -> dict[str, Any]:
        """Parameters and buffers from `path` (the judge's draw, or the reference's own again),
        copied into ModelNew where name and shape match, as at the start."""
        weights = self.torch.load(path, weights_only=True, map_location=self.device)
        try:
            copy_weights(weights, self.model)
        except Exception as exc:
            raise Failure("verify", f"loading the module's parameters and buffers raised: {first_line(exc)}") from None
        own = self.model.state_dict()
        missing = sorted(k for k, v in weights.items() if k not in own or own[k].shape != v.shape)
        return {"loaded": True, "missing": missing[:20]}

    def op_arena(self, layout: dict[str, Any]) -> dict[str, Any]:
        """n calls timed by the judge's own clock on inputs the reference process wrote into an
        arena whose descriptors came just before this request (harness/arena.py): each output
        copied into its slot. Nothing is reported but "done": the judge freezes this process and
        the reference process reads the slots."""
        from kcoder.evaluate.harness.arena import ArenaError, serve

        self.batch_run, self.last = None, None
        # No check of this process's own state before "done": the clock runs until the reply, and
        # nothing this process says about itself is evidence (the audits between batches check it).
        try:
            self.mapped = serve(self.torch, getattr(self, "mapped", None), layout, self.outbox.sock, self.model,
                                lambda fn: self._call(fn, "timing", direct=True))
        except ArenaError as exc:
            raise HarnessFault(f"the arena: {first_line(exc)}") from None
        return {"done": True}

    def op_save_batch(self, index: int, path: str) -> dict[str, Any]:
        run = self.batch_run
        if run is None or not 0 <= index < len(run.outputs):
            raise HarnessFault(f"no kept output of batch call {index}")
        return self._save(run.outputs[index], path)


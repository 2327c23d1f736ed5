"""The search loop: ask a strategy for points, build them ahead, judge each, keep the fastest.

Each point is the candidate file with its CONFIG literal rewritten, judged by kcoder's own
evaluator (`kcoder.evaluate.evaluate`): built, verified on fresh inputs and timed exactly as
`kcoder eval` would. A point that fails anything is recorded invalid with the judge's reason
and never chosen. Points are built ahead in a thread pool (each build is a child process of
the judge, so threads only wait): on cuda the host builds the next points while the GPU times
the current one; on cpu the builds finish before any timing starts, since they would share
the cores being timed. The build cache makes the timed evaluation's build a lookup.

A build ahead is host work only: a compile-only evaluation (no reference process; on cuda the
candidate's process sees no GPU and never constructs ModelNew), and its resource step reads
ptxas with no GPU either; every step that runs on the device holds the device's lock
(devicelock.py), so a timed point never overlaps other device work of kcoder's.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kcoder.evaluate.options import EvalOptions
from kcoder.tune.cache import TuneCache, device_identity
from kcoder.tune.space import Config, Space, config_key, load_space
from kcoder.tune.strategies import Strategy, make_strategy
from kcoder.verdict import Verdict

STALL_ASKS = 200  # consecutive proposals of known points: the sampler has converged


@dataclass
class TuneOptions:
    """How to search. trials/time_s: budgets in judged points and seconds (None: no limit);
    jobs: points built ahead in parallel (None: by host cores); plain_check: verify the best
    point once more built as plain load_inline builds it; resources: ptxas per point (cuda)."""

    strategy: str = "auto"
    trials: int | None = None
    time_s: float | None = None
    seed: int = 0
    jobs: int | None = None
    use_cache: bool = True
    plain_check: bool = True
    compare_compile: bool = True  # the plain check also times torch.compile
    resources: bool = True
    profile_top: int = 3  # cuda: Nsight Compute metrics for this many of the fastest points (0: none)

    def build_jobs(self) -> int:
        cores = len(os.sched_getaffinity(0))
        return max(1, self.jobs if self.jobs is not None else min(8, cores // 4))


@dataclass
class PointResult:
    """One judged (or refused) point. status: ok, incorrect, build-failed, constraint, error."""

    trial: int
    config: Config
    status: str
    reason: str = ""
    time_us: float | None = None
    iqr_us: float | None = None
    speedup_vs_eager: float | None = None
    seconds: float = 0.0
    cached: bool = False
    registers: int | None = None
    spills: int | None = None
    file: str = ""
    ncu: dict[str, Any] | None = None  # Nsight Compute summary (tune/ncu.py): the fastest few only

    @property
    def valid(self) -> bool:
        return self.status == "ok" and self.time_us is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TuneResult:
    """What a tuning found. `best` is None when no point was valid."""

    problem: str
    candidate: str
    strategy: str
    space: dict[str, list[Any]]
    constraints: list[str]
    points: list[PointResult] = field(default_factory=list)
    best: PointResult | None = None
    hand_picked: PointResult | None = None
    best_source: str | None = None
    final: Verdict | None = None  # the plain-build check of the best point
    final_cached: bool = False  # that check's verdict came from the cache
    identity: dict[str, str] = field(default_factory=dict)
    stopped: str = ""
    seconds: float = 0.0
    evaluated: int = 0  # points judged in this run (cached ones excluded)
    notes: list[str] = field(default_factory=list)  # what could not be measured, one line each

    @property
    def speedup_over_hand_picked(self) -> float | None:
        if self.best and self.hand_picked and self.hand_picked.valid and self.best.time_us:
            return self.hand_picked.time_us / self.best.time_us  # type: ignore[operator]
        return None


Listener = Callable[[str, dict[str, Any]], None]
Evaluator = Callable[[Path, Path, EvalOptions], Verdict]


def judge(problem: Path, candidate: Path, options: EvalOptions) -> Verdict:
    """kcoder's evaluator (imported on first use), unless the caller injects another."""
    from kcoder.evaluate import evaluate

    return evaluate(problem, candidate, options)


def point_record(verdict: Verdict) -> dict[str, Any]:
    """A verdict as a point's status and figures."""
    if verdict.correct:
        status = "ok"
    elif verdict.status == "error":
        status = "error"  # kcoder's own failure: invalid here, but never cached against the kernel
    elif not verdict.compiled:
        status = "build-failed"
    else:
        status = "incorrect"
    return {"status": status, "reason": verdict.reason, "time_us": verdict.candidate_us,
            "iqr_us": verdict.candidate_iqr_us, "speedup_vs_eager": verdict.speedup_vs_eager}


class Search:
    """One tuning run's state: the loop, the budgets, the results."""

    def __init__(self, problem: Path, space: Space, options: EvalOptions, topts: TuneOptions,
                 work_dir: Path, listen: Listener | None = None, evaluator: Evaluator | None = None) -> None:
        self.problem, self.space, self.options, self.topts = problem, space, options, topts
        self.evaluate = evaluator or judge
        self.work_dir, self.listen = work_dir, listen or (lambda kind, data: None)
        self.identity = device_identity(options.device)
        policy = {"precision": options.precision, "allow": sorted(options.allow), "fast_build": options.fast_build}
        self.cache = TuneCache(space.kernel_key(), problem, self.identity, policy) if topts.use_cache else None
        self.strategy: Strategy = make_strategy(topts.strategy, space, topts.trials, topts.seed)
        self.points: list[PointResult] = []
        self.known: dict[str, PointResult] = {}
        self.trials = 0  # points measured or taken from the cache: the trial budget counts these
        self.evaluated = 0
        self.started = time.monotonic()
        self.stopped = ""
        self.eval_seconds: list[float] = []

    # --- budgets ---------------------------------------------------------------------------
    def trials_left(self) -> int:
        return self.space.size if self.topts.trials is None else self.topts.trials - self.trials

    def out_of_time(self) -> bool:
        return self.topts.time_s is not None and time.monotonic() - self.started >= self.topts.time_s

    def eta_s(self) -> float | None:
        if not self.eval_seconds:
            return None
        per = sum(self.eval_seconds) / len(self.eval_seconds)
        left = min(self.trials_left(), self.space.size - len(self.known))
        eta = per * max(0, left)
        if self.topts.time_s is not None:
            eta = min(eta, max(0.0, self.topts.time_s - (time.monotonic() - self.started)))
        return eta

    # --- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        jobs = self.topts.build_jobs()
        self.listen("start", {"size": self.space.size, "strategy": self.strategy.name, "jobs": jobs,
                              "trials": self.topts.trials, "time_s": self.topts.time_s})
        with self.session(), ThreadPoolExecutor(max_workers=jobs) as pool:
            while not self.stopped:
                if self.out_of_time():
                    self.stopped = "time budget"
                    break
                batch = self.next_batch(jobs)
                if batch:
                    self.judge_batch(batch, pool if jobs > 1 else None)

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """kcoder's judge keeps the problem's reference process across the points it times
        (evaluate/session.py): a point costs its own start, verification and timing. An injected
        evaluator is used as it is."""
        if self.evaluate is not judge:
            yield
            return
        from kcoder.evaluate.session import EvalSession

        with EvalSession(self.problem) as session:
            self.evaluate = session.evaluator  # builds ahead (compile only) stay plain evaluations
            try:
                yield
            finally:
                self.evaluate = judge

    def next_batch(self, size: int) -> list[Config]:
        """Up to `size` new points to judge; refused, repeated and cached points are settled
        on the way (they cost no build)."""
        batch: list[Config] = []
        stalls = 0
        while len(batch) < size and len(batch) < self.trials_left():
            config = self.strategy.ask()
            if config is None:
                self.stopped = "space exhausted"
                break
            key = config_key(config)
            if key in self.known or any(config_key(c) == key for c in batch):
                if key in self.known:
                    self.strategy.tell(config, self._value(self.known[key]))
                stalls += 1
                if stalls >= STALL_ASKS or len(self.known) >= self.space.size:
                    self.stopped = "space exhausted" if len(self.known) >= self.space.size else "converged"
                    break
                continue
            stalls = 0
            if (broken := self.space.violated(config)) is not None:
                self.record(PointResult(0, config, "constraint", f"violates {broken}"), count=False)
            elif (cached := self.cache.point(key) if self.cache else None) is not None:
                self.record(PointResult(**{**cached, "trial": 0, "config": config, "cached": True}))
            else:
                batch.append(config)
        if not batch and not self.stopped and self.trials_left() <= 0:
            self.stopped = "trial budget"
        return batch

    def judge_batch(self, batch: list[Config], pool: ThreadPoolExecutor | None) -> None:
        files = [self.write_point(c) for c in batch]
        builds: list[Future[Any] | None] = [pool.submit(self.prebuild, f) if pool else None for f in files]
        if self.options.device != "cuda":
            for fut in builds:  # builds and timing would share the host's cores
                if fut is not None:
                    fut.exception()
        for config, file, fut in zip(batch, files, builds, strict=True):
            if self.out_of_time():
                self.stopped = "time budget"
                return
            self.judge_point(config, file, fut)

    def write_point(self, config: Config) -> Path:
        folder = self.work_dir / "points"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"point{len(list(folder.glob('point*.py'))):03d}.py"
        path.write_text(self.space.rewrite(config))
        return path

    def prebuild(self, file: Path) -> tuple[Verdict, dict[str, Any]]:
        """Build a point ahead of its timing (and read its ptxas resources on cuda)."""
        from kcoder.tune.resources import arch_list, point_resources

        arch = self.identity.get("arch", "")
        verdict = self.evaluate(self.problem, file, replace(self.options, stop_after="compile",
                                                            build_arch=arch_list(arch)))
        resources: dict[str, Any] = {}
        if verdict.compiled and self.topts.resources and self.options.device == "cuda":
            resources = point_resources(self.problem, file, arch, self.options.sandbox)
        return verdict, resources

    def judge_point(self, config: Config, file: Path, fut: Future[Any] | None) -> None:
        started = time.monotonic()
        resources: dict[str, Any] = {}
        built = fut.result() if fut is not None else None
        if built is not None:
            resources = built[1]
        if built is not None and not built[0].compiled:
            verdict = built[0]  # a failed build is final: no point timing it
        else:
            # a point is judged at the problem's shapes only: the file written back is verified at
            # the drawn batch sizes too (final_check keeps the options' --shapes), a point need not be
            verdict = self.evaluate(self.problem, file, replace(self.options, stop_after="timing",
                                                                compile_baseline=False, shapes="off"))
            if fut is None and verdict.compiled and self.topts.resources and self.options.device == "cuda":
                from kcoder.tune.resources import point_resources

                resources = point_resources(self.problem, file, self.identity.get("arch", ""), self.options.sandbox)
        took = round(time.monotonic() - started, 2)
        self.eval_seconds.append(took)
        self.evaluated += 1
        point = PointResult(0, config, **point_record(verdict), seconds=took, file=str(file), **resources)
        self.record(point)
        if self.cache and point.status != "error":
            self.cache.store_point(config_key(config), {k: v for k, v in point.to_dict().items()
                                                        if k not in ("trial", "config", "cached", "file")})

    def record(self, point: PointResult, count: bool = True) -> None:
        if count:
            self.trials += 1
            point.trial = self.trials
        self.points.append(point)
        self.known[config_key(point.config)] = point
        self.strategy.tell(point.config, self._value(point))
        self.listen("point", {"point": point, "done": self.trials, "best": self.best(), "eta_s": self.eta_s()})

    @staticmethod
    def _value(point: PointResult) -> float | None:
        return point.time_us if point.valid else None

    def best(self) -> PointResult | None:
        valid = [p for p in self.points if p.valid]
        return min(valid, key=lambda p: p.time_us) if valid else None  # type: ignore[arg-type,return-value]


def tune(problem: str | Path, candidate: str | Path, options: EvalOptions, topts: TuneOptions,
         work_dir: Path, listen: Listener | None = None, evaluator: Evaluator | None = None,
         profiler: Callable[[Path, Path], Any] | None = None) -> TuneResult:
    """Search `candidate`'s declared space against `problem`. Raises SpaceError (a ValueError)
    for a missing or malformed declaration and ProblemError for a bad problem file; the
    candidate file itself is only read."""
    from kcoder.problem import load_problem

    options.validate()
    problem_path = load_problem(problem).path
    space = load_space(candidate)
    search = Search(problem_path, space, options, topts, work_dir, listen, evaluator)
    search.run()
    result = TuneResult(str(problem_path), str(Path(candidate).resolve()), search.strategy.name,
                        space.params, space.constraints, search.points, search.best(),
                        search.known.get(config_key(space.current)), identity=search.identity,
                        stopped=search.stopped or "done", evaluated=search.evaluated)
    if result.best is not None and options.device == "cuda" and topts.profile_top > 0:
        from kcoder.tune.ncu import profile_best, run_profiler

        search.listen("profile", {"top": topts.profile_top})
        profile_best(result, work_dir, topts.profile_top,  # after the search; in the sandbox, like eval
                     profiler or functools.partial(run_profiler, sandbox=options.sandbox))
    if result.best is not None:
        result.best_source = space.rewrite(result.best.config)
        if topts.plain_check:
            result.final, result.final_cached = final_check(search, result.best_source)
    result.seconds = round(time.monotonic() - search.started, 1)
    return result


def final_check(search: Search, source: str) -> tuple[Verdict, bool]:
    """The best point verified and timed once more, built exactly as plain load_inline builds
    it (and against torch.compile when asked): what the tuned file is, judged alone. Returns
    the verdict and whether it came from the cache (where it is kept as JSON)."""
    key = config_key(load_space_text(source, search.space).current)
    cached = search.cache.final(key) if search.cache else None
    if cached is not None:
        return Verdict.from_dict(cached), True
    path = search.work_dir / "best_check.py"
    path.write_text(source)
    search.listen("final", {})
    opts = replace(search.options, stop_after="timing", fast_build=False,
                   compile_baseline=search.topts.compare_compile)
    v = search.evaluate(search.problem, path, opts)
    v.plain_build = "verified" if v.correct else v.reason
    if search.cache and v.status != "error":
        search.cache.store_final(key, v.to_dict())
    return v, False


def load_space_text(source: str, like: Space) -> Space:
    from kcoder.tune.space import parse_space

    return parse_space(source, like.path)

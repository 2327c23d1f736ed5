"""What to try next: exhaustive enumeration, a model-based sampler (TPE) and an evolutionary one.

Why optuna: it is well kept, its samplers take categorical parameters natively (every knob
here is a list of values), it has an ask/tell interface (the engine builds points ahead in
parallel and reports them as they are timed) and parameter-importance analysis for the plot.

- tpe: optuna's Tree-structured Parzen Estimator, multivariate (block size and vector width
  interact), with the constant liar so points asked together for parallel builds differ.
- evolution: optuna's NSGA-II sampler used with one objective, i.e. a genetic algorithm
  (tournament selection, uniform crossover, mutation). Chosen over CMA-ES because CMA-ES
  models a continuous Gaussian and optuna hands categorical parameters (all of ours) to an
  independent random sampler, so it would not evolve anything here; a GA recombines
  categorical genes directly.
- exhaustive: every point, for spaces that fit the budget; the reference the others are
  judged against (bench/tune.py).

Every strategy measures the candidate's own CONFIG first, so a tuned file is never worse than
the hand-picked choice by omission.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any, Protocol

from kcoder.choices import TUNE_STRATEGIES
from kcoder.tune.space import Config, Space, config_key

AUTO_EXHAUSTIVE_MAX = 64  # without a trial budget, auto enumerates spaces up to this size


class Strategy(Protocol):
    """Proposes points; learns from their times (None: the point was invalid)."""

    name: str

    def ask(self) -> Config | None: ...

    def tell(self, config: Config, value: float | None) -> None: ...


class Exhaustive:
    """Every point once, the current CONFIG first."""

    name = "exhaustive"

    def __init__(self, space: Space) -> None:
        self._points: Iterator[Config] = space.points()

    def ask(self) -> Config | None:
        return next(self._points, None)

    def tell(self, config: Config, value: float | None) -> None:
        pass  # enumeration learns nothing


class OptunaStrategy:
    """An optuna sampler driven through ask/tell; a point asked more than once (samplers do
    repeat categorical points) is told the same result for every trial that asked it."""

    def __init__(self, name: str, space: Space, sampler: Any) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.name, self._space = name, space
        self._state = optuna.trial.TrialState
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self.study.enqueue_trial(dict(space.current))
        self._pending: dict[str, list[Any]] = {}

    def ask(self) -> Config | None:
        trial = self.study.ask()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # optuna's notes on experimental options and fallbacks
            config = {name: trial.suggest_categorical(name, values) for name, values in self._space.params.items()}
        self._pending.setdefault(config_key(config), []).append(trial)
        return config

    def tell(self, config: Config, value: float | None) -> None:
        for trial in self._pending.pop(config_key(config), []):
            if value is None:
                self.study.tell(trial, state=self._state.FAIL)
            else:
                self.study.tell(trial, value)


def make_strategy(name: str, space: Space, trials: int | None, seed: int = 0) -> Strategy:
    """The strategy `name` for `space` with a budget of `trials` points (None: no limit)."""
    if name == "auto":
        name = auto_choice(space, trials)
    if name == "exhaustive":
        return Exhaustive(space)
    import optuna

    budget = trials or space.size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # multivariate TPE is marked experimental
        if name == "tpe":
            sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                                 n_startup_trials=max(2, min(10, budget // 3)))
        elif name == "random":  # a baseline for bench/tune.py, not offered on the command line
            sampler = optuna.samplers.RandomSampler(seed=seed)
        elif name == "evolution":
            # a population a third of the budget: at least a few generations of selection
            sampler = optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(20, budget // 3)))
        else:
            raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(TUNE_STRATEGIES)}")
    return OptunaStrategy(name, space, sampler)


def auto_choice(space: Space, trials: int | None) -> str:
    """exhaustive when every point fits the budget, else the model-based sampler."""
    limit = trials if trials is not None else AUTO_EXHAUSTIVE_MAX
    return "exhaustive" if space.size <= limit else "tpe"

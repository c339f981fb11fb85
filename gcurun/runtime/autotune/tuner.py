"""Rank 0's tuner: it watches the job's steps, scores each sample of steps by bytes
reduced per second (Horovod's score), asks the search for the next knobs and, once the
budget of samples is spent, settles on the best. The engine sends each decision to every
rank in its next cycle (:mod:`gcurun.runtime.engine.cycles`).

A step ends where a tensor name of the current step comes again (Horovod's rule). A
sample is ``steps_per_sample`` steps under one setting, after the first step under it
(which began under the previous one); its score is the median of its steps' scores.
The first ``warmup_samples`` samples are discarded. When the budget is spent, the best
setting and the starting one are measured once more each (one lucky sample on a noisy
machine must not decide alone), and the higher mean of each one's samples wins.

With a cache (:class:`store.TuneCache`), the first step tells the job's shape: where
the cache knows it, the job starts from the cached best and only re-checks it (one
sample, after a sample's worth of start-up steps when there are warmup samples; tuning
resumes from it when it scores below the cache's score by more than the re-tune
threshold). Once settled, the tuner keeps watching the bytes per step: when
they move by more than the threshold for a sample's worth of steps (a model unfrozen
mid-training), it tunes again for the new traffic.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass
from enum import Enum

from gcurun.runtime.autotune import search as srch
from gcurun.runtime.autotune.knobs import Knobs
from gcurun.runtime.autotune.store import SampleLog, Shape, TuneCache
from gcurun.runtime.settings import AutotuneEnv

log = logging.getLogger("gcurun.autotune")


# Fresh samples each of the search's best and of the starting settings before settling.
CONFIRM_ROUNDS = 2


class Phase(Enum):
    LEARN = "learning the traffic"
    CHECK = "re-checking the cached settings"
    WARMUP = "warming up"
    TUNE = "tuning"
    CONFIRM = "re-measuring the best beside the starting settings"
    DONE = "settled"


@dataclass
class Outcome:
    """What the tuning came to, for the summary."""

    best: Knobs
    score: float | None
    start_score: float | None
    samples: int
    steps: int
    finished: bool
    from_cache: bool = False
    cached_score: float | None = None


class Tuner:
    """The state machine of rank 0's tuning (no I/O but its log and cache files)."""

    def __init__(self, config: AutotuneEnv, start: Knobs, held: frozenset[str],
                 shape: Shape):
        self.config = config
        self.start = self.current = start
        self.held = held
        self.shape = shape
        self.distributions = srch.space(held)
        self.log = SampleLog(config.log_file) if config.log_file else None
        self.cache = TuneCache(config.cache) if config.cache else None
        self.phase = Phase.LEARN
        self.steps = 0
        self.samples = 0                # samples scored in this tuning (after warmup)
        self.search: srch.Search | None = None
        self._waiting = False           # for the search's next point
        self._skip = 0                  # steps to leave out (they began under old knobs)
        self._scores: list[float] = []
        self._warmup_left = 0
        self._seen: set[str] = set()
        self._step_bytes = 0
        self._sizes: list[int] = []
        self._step_start: float | None = None
        self.key: str | None = None
        self._ref_bytes = 0
        self._drifting = 0
        self.start_score: float | None = None
        self.best: tuple[Knobs, float] | None = None
        self.from_cache = False
        self.cached_score: float | None = None
        self._cached_samples = 0
        self._confirm: list[Knobs] = []            # knobs still to measure again
        self._confirm_scores: dict[Knobs, list[float]] = {}

    # -- steps ------------------------------------------------------------------------------

    def observe(self, items: list[tuple[str, int]], now: float) -> Knobs | None:
        """The ops (name, bytes) one cycle ran, at ``now``: the knobs every rank must
        take next, or None."""
        decision = None
        for name, nbytes in items:
            if name in self._seen:
                decision = self._end_step(now) or decision
            self._seen.add(name)
            self._step_bytes += nbytes
            self._sizes.append(nbytes)
        return decision

    def _end_step(self, now: float) -> Knobs | None:
        start, self._step_start = self._step_start, now
        nbytes, sizes = self._step_bytes, self._sizes
        self._seen, self._step_bytes, self._sizes = set(), 0, []
        if start is None:           # the first boundary: the job's first step is done
            return self._learn(sizes) if self.phase == Phase.LEARN else None
        self.steps += 1
        duration = now - start
        if self.phase == Phase.LEARN:
            return self._learn(sizes)
        if self.phase == Phase.DONE:
            return self._watch(nbytes, sizes)
        if self._waiting:
            return self._take_next_point()
        if self._skip:
            self._skip -= 1
            return None
        if duration > 0:
            self._scores.append(nbytes / duration)
        if len(self._scores) < self.config.steps_per_sample:
            return None
        score, self._scores = statistics.median(self._scores), []
        return self._sampled(score)

    # -- phases -------------------------------------------------------------------------------

    def _learn(self, sizes: list[int]) -> Knobs | None:
        """The first whole step: the job's traffic, and what the cache knows of it."""
        self.key = self.shape.key(sizes)
        self._ref_bytes = sum(sizes)
        cached = self.cache.lookup(self.key) if self.cache is not None else None
        if cached is not None:
            knobs, score = self._held_as_started(cached.knobs), cached.score
            self.from_cache, self.cached_score = True, score
            self.start_score, self._cached_samples = cached.default_score, cached.samples
            log.info("the cache knows this job's shape: starting from %s (%.1f MB/s); "
                     "re-checking it", knobs.describe(), score / 1e6)
            # The re-check waits out a sample's worth of the job's first steps, as the
            # warmup samples do: they carry its start-up costs, and a score taken on them
            # would send a job of the same shape back to tuning for nothing.
            self.phase = Phase.CHECK
            self._skip = 1 + self.config.steps_per_sample * min(self.config.warmup_samples, 1)
            return self._switch(knobs)
        self._begin_tuning([self.start])
        return None

    def _begin_tuning(self, first: list[Knobs]) -> None:
        names = list(self.distributions)
        self.search = srch.Search(self.distributions, [k.params(names) for k in first],
                                  self.config.sampler, self.config.noise, self.config.seed)
        self.samples, self.best, self.start_score = 0, None, None
        self._warmup_left = self.config.warmup_samples
        self.phase = Phase.WARMUP if self._warmup_left else Phase.TUNE
        self._skip, self._scores = 1, []
        if self.phase == Phase.TUNE:
            self._ask(None)
        tuned = ", ".join(names) or "nothing (every knob is held)"
        log.info("tuning %s%s; %d samples of %d steps after %d warmup samples", tuned,
                 f" (held: {', '.join(sorted(self.held))})" if self.held else "",
                 self.config.max_samples, self.config.steps_per_sample,
                 self.config.warmup_samples)

    def _ask(self, score: float | None) -> None:
        assert self.search is not None
        self.search.next(score)
        self._waiting = True

    def _take_next_point(self) -> Knobs | None:
        assert self.search is not None
        params = self.search.ready()
        if params is None:
            return None
        self._waiting = False
        self._skip, self._scores = 1, []
        return self._switch(self.start.with_params(params))

    def _sampled(self, score: float) -> Knobs | None:
        if self.phase == Phase.WARMUP:
            self._warmup_left -= 1
            log.debug("warmup sample: %.1f MB/s (%d more)", score / 1e6, self._warmup_left)
            if not self._warmup_left:
                self.phase = Phase.TUNE
                self._ask(None)
            return None
        if self.phase == Phase.CHECK:
            assert self.cached_score is not None
            if score >= (1 - self.config.retune_threshold) * self.cached_score:
                self.best = (self.current, score)
                self.samples = 1
                self._settle(retuned=False, searched=self._cached_samples)
                return None
            log.info("the cached settings score %.1f MB/s, below the cache's %.1f: tuning "
                     "again from them", score / 1e6, self.cached_score / 1e6)
            self._begin_tuning([self.current, self.start])
            return None
        if self.phase == Phase.CONFIRM:
            return self._confirmed(score)
        self.samples += 1
        if self.log is not None:
            self.log.row(self.current, score)
        log.debug("sample %d: %s: %.1f MB/s", self.samples, self.current.describe(),
                  score / 1e6)
        if self.start_score is None and self.current == self.start:
            self.start_score = score
        if self.best is None or score > self.best[1]:
            self.best = (self.current, score)
        if self.samples >= self.config.max_samples or not self.distributions:
            return self._confirm_best()
        self._ask(score)
        return None

    def _confirm_best(self) -> Knobs | None:
        """The budget is spent: the best and the starting settings are measured again,
        ``CONFIRM_ROUNDS`` fresh samples each, in turns (best, start, best, start), and
        the search's own samples are left out: on a noisy machine the best of many
        samples is the luckiest as often as the fastest. The best is kept only when its
        fresh mean is higher than the starting settings'."""
        assert self.best is not None
        best, _ = self.best
        if best == self.start or self.start_score is None:
            return self._settle(retuned=True)
        self.phase = Phase.CONFIRM
        self._confirm = [best, self.start] * CONFIRM_ROUNDS
        self._confirm_scores = {best: [], self.start: []}
        self._skip, self._scores = 1, []
        return self._switch(best)

    def _confirmed(self, score: float) -> Knobs | None:
        self._confirm_scores[self._confirm.pop(0)].append(score)
        if self._confirm:
            self._skip, self._scores = 1, []
            return self._switch(self._confirm[0])
        means = {k: statistics.mean(v) for k, v in self._confirm_scores.items()}
        log.debug("re-measured: %s", ", ".join(f"{k.describe()}: {v / 1e6:.1f} MB/s"
                                                for k, v in means.items()))
        best = next(k for k in means if k != self.start)
        chosen = best if means[best] > means[self.start] else self.start
        self.best = (chosen, means[chosen])
        return self._settle(retuned=True)

    def _settle(self, retuned: bool, searched: int | None = None) -> Knobs | None:
        """Take the best knobs for good; ``searched``: the samples the search that found
        them took (default: this one's)."""
        assert self.best is not None
        knobs, score = self.best
        self.phase = Phase.DONE
        self._drifting = 0
        if self.log is not None and retuned:
            self.log.row(knobs, score)
        if self.cache is not None and self.key is not None:
            self.cache.store(self.key, knobs, score, self.start_score,
                             self.samples if searched is None else searched)
        log.info("settled on %s (%.1f MB/s) after %d samples", knobs.describe(),
                 score / 1e6, self.samples)
        return self._switch(knobs)

    def _watch(self, nbytes: int, sizes: list[int]) -> Knobs | None:
        """Settled: tune again when the bytes per step move by more than the threshold
        for a sample's worth of steps."""
        ref = max(self._ref_bytes, 1)
        if abs(nbytes - ref) / ref <= self.config.retune_threshold:
            self._drifting = 0
            return None
        self._drifting += 1
        if self._drifting < self.config.steps_per_sample:
            return None
        log.info("the bytes per step moved from %d to %d (beyond %g): tuning again",
                 self._ref_bytes, nbytes, self.config.retune_threshold)
        self.phase = Phase.LEARN
        self.from_cache = False
        return self._learn(sizes)

    # -- helpers ------------------------------------------------------------------------------

    def _switch(self, knobs: Knobs) -> Knobs | None:
        if knobs == self.current:
            return None
        self.current = knobs
        return knobs

    def _held_as_started(self, knobs: Knobs) -> Knobs:
        """``knobs`` with the held ones as this job set them."""
        values = knobs.to_json()
        for name in self.held:
            values[name] = getattr(self.start, name)
        return Knobs.from_json(values)

    def outcome(self) -> Outcome:
        """What the tuning came to so far."""
        best = self.best
        return Outcome(best=best[0] if best else self.current,
                       score=best[1] if best else None, start_score=self.start_score,
                       samples=self.samples, steps=self.steps,
                       finished=self.phase == Phase.DONE, from_cache=self.from_cache,
                       cached_score=self.cached_score)

    def close(self) -> list[str]:
        """At the end of the job: close the log; the summary's lines."""
        if self.log is not None:
            self.log.close()
            self.log = None
        return summary(self.outcome(), self.phase, self.config.max_samples)


def summary(out: Outcome, phase: Phase, budget: int) -> list[str]:
    """The lines that say what autotune chose, how well, and how to keep it."""
    if out.score is None:
        return [f"no sample was scored ({phase.value} after {out.steps} steps): the job "
                "ended too soon, or no tensor name came twice (a step is where a name "
                "comes again); nothing chosen"]
    lines = []
    state = "chose" if out.finished else f"not finished ({out.samples} of {budget} " \
                                         "samples); best so far"
    lines.append(f"{state}: {out.best.describe()}")
    score = f"score {out.score / 1e6:.1f} MB/s reduced"
    if out.from_cache:
        versus = f"; the starting settings then: {out.start_score / 1e6:.1f} MB/s" \
            if out.start_score else ""
        lines.append(f"{score}, re-checked from the cache (cached: "
                     f"{(out.cached_score or 0) / 1e6:.1f} MB/s{versus}); 1 sample, "
                     f"{out.steps} steps")
    elif out.start_score:
        lines.append(f"{score}; the starting settings: {out.start_score / 1e6:.1f} MB/s "
                     f"(x{out.score / out.start_score:.2f}); {out.samples} samples, "
                     f"{out.steps} steps")
    else:
        lines.append(f"{score}; {out.samples} samples, {out.steps} steps")
    lines.append(f"to start there next time: gcurun {out.best.command_line()} ...")
    lines.append("or in a profile:")
    lines.extend("  " + line for line in out.best.profile_lines())
    return lines

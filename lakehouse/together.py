"""Several jobs of the pipeline in one driver (`jobs/run_pipeline.py`): each step of
`core.pipeline.plan` (all of them, or those picked) runs its job's own library function with
its job's own flags, in a thread and a Spark session of its own.

Why one driver: every job's JVM pays for itself (its JIT, its heap, its idle triggers), so on a
small machine seven continuous jobs as seven processes leave the batches little CPU
(bench/README, freshness). In one driver the streams share one JVM and Delta's cached logs.

Why a session per step: the idempotent-commit settings (`core.tables.transaction`, Delta's
txnAppId/txnVersion) are SQL settings of a session. Steps sharing one would commit under each
other's transaction ids: a MERGE skipped as already done, or recorded as another job's. A
`newSession()` has SQL settings of its own and shares the SparkContext.

Continuous: every step at once, each as soon as the table it reads exists (a refine waits for
its bronze table, which its ingest creates as it starts; alone, the job would fail); the first
step that fails stops the others at their next check (as SIGTERM does) and its error is the
job's. Available-now: stage by stage (ingest, refine, gold, offline), the steps of a stage at
once; a failed stage ends the run before the next. Call it from the main thread (as `run_job`
does): the steps' streams stop on the stop event SIGTERM sets there."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakehouse.core import pipeline, tables
from lakehouse.core.errors import UsageError
from lakehouse.core.pipeline import Step
from lakehouse.core.settings import Settings
from lakehouse.core.streaming import stop_on_signals

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# A step's work once its flags are parsed: (its own session, the settings) -> its result.
Body = Callable[["SparkSession", Settings], object]


@dataclass(frozen=True)
class PipelineOptions:
    env: str
    trigger: str = "available-now"
    only: tuple[str, ...] = ()  # task ids (`refine_silver.orders`); empty: every step
    trigger_interval: str | None = None  # the refine streams' (continuous); None: their default


@dataclass(frozen=True)
class PipelineResult:
    results: tuple[tuple[str, object], ...]  # (task id, its job's result), in plan order

    def summary(self) -> str:
        lines = []
        for task_id, result in self.results:
            summary = getattr(result, "summary", None)
            lines.append(f"{task_id}: {summary() if callable(summary) else 'done'}")
        return "\n".join(lines)


def chosen_steps(settings: Settings, only: Sequence[str]) -> list[Step]:
    """The plan's steps named in `only` (all of them when it is empty), in plan order."""
    planned = pipeline.plan(settings)
    if not only:
        return planned
    known = [step.task_id for step in planned]
    unknown = [task_id for task_id in only if task_id not in known]
    if unknown:
        raise UsageError(
            f"--only {', '.join(unknown)}: not a step of this pipeline; its steps: "
            f"{', '.join(known) or 'none (no source or table is configured)'}"
        )
    return [step for step in planned if step.task_id in only]


def body(step: Step, options: PipelineOptions) -> Body:
    """The step's work, its flags parsed by its own job's parser (so a bad flag fails here,
    before any step starts, as it would in that job)."""
    from lakehouse.bronze import ingest as bronze
    from lakehouse.gold import build as gold
    from lakehouse.offline import move
    from lakehouse.silver import refine

    argv = [*step.args, "--env", options.env, "--trigger", options.trigger]
    if step.job in pipeline.INGEST_KINDS:
        kind = pipeline.INGEST_KINDS[step.job]
        ingest = bronze.options_from_args(bronze.ingest_parser(step.job, step.job).parse_args(argv))
        return lambda spark, settings: bronze.ingest(spark, settings, ingest, kind)
    if step.job == "refine_silver":
        if options.trigger_interval:
            argv += ["--trigger-interval", options.trigger_interval]
        refined = refine.options_from_args(refine.refine_parser().parse_args(argv))
        return lambda spark, settings: refine.refine(spark, settings, refined)
    if step.job == "build_gold":
        built = gold.options_from_args(gold.gold_parser().parse_args(argv))
        return lambda spark, settings: gold.run(spark, settings, built)
    if step.job == "realtime_to_offline":
        moved = move.options_from_args(move.move_parser().parse_args(argv))
        return lambda spark, settings: move.run(spark, settings, moved)
    raise UsageError(f"step {step.task_id}: no job {step.job!r} runs in one driver")


def inputs(settings: Settings, step: Step) -> list[str]:
    """The tables a step reads, which must exist before it starts (its job fails otherwise)."""
    from lakehouse.bronze.ingest import bronze_path
    from lakehouse.gold import source
    from lakehouse.offline import store

    if step.job == "refine_silver":
        return [bronze_path(settings, settings.silver[step.name].source)]
    if step.job == "realtime_to_offline":
        return [store.realtime_path(settings, settings.offline_table(step.name))]
    if step.job == "build_gold":
        return [source.required_path(settings, source.resolve(settings, settings.gold[step.name]))]
    return []


class NotStarted:
    """The result of a step that never ran: stopped (by SIGTERM or a failed step) while it
    waited for its input or its stage."""

    def summary(self) -> str:
        return "not started"


@dataclass
class _Run:
    step: Step
    body: Body
    result: object = field(default_factory=NotStarted)
    error: BaseException | None = None
    thread: threading.Thread | None = field(default=None, repr=False)


def run_pipeline(
    spark: SparkSession, settings: Settings, options: PipelineOptions
) -> PipelineResult:
    runs = [_Run(step, body(step, options)) for step in chosen_steps(settings, options.only)]
    with stop_on_signals(options.trigger) as stop:
        if options.trigger == "continuous":
            _run_at_once(spark, settings, runs, stop, wait=True)
        else:
            for stage in pipeline.STAGES:
                _run_at_once(spark, settings, [r for r in runs if r.step.stage == stage], stop)
                if any(r.error for r in runs):
                    break
    failed = [(r.step.task_id, r.error) for r in runs if r.error is not None]
    for task_id, error in failed[1:]:
        log.error("%s also failed", task_id, exc_info=error)
    if failed:
        raise failed[0][1]
    return PipelineResult(tuple((r.step.task_id, r.result) for r in runs))


def _run_at_once(
    spark: SparkSession,
    settings: Settings,
    runs: Sequence[_Run],
    stop: threading.Event,
    wait: bool = False,
) -> None:
    """Each run in a thread of its own (pyspark's InheritableThread: a JVM thread of its own
    too), each with its own session, after its inputs exist if `wait`; the first failure sets
    `stop` for the others."""
    from pyspark import InheritableThread

    def target(run: _Run) -> None:
        try:
            session = spark.newSession()
            if wait and not _inputs_ready(session, settings, run, stop):
                return  # stopped while it waited: nothing ran (its result says so)
            run.result = run.body(session, settings)
        except BaseException as exc:  # reported by the main thread; the others must stop
            run.error = exc
            log.error("%s failed; stopping the other steps", run.step.task_id)
            stop.set()

    for run in runs:
        run.thread = InheritableThread(target=target, args=(run,), name=run.step.task_id)
        run.thread.start()
    for run in runs:
        # Short joins: the main thread must stay free to take SIGTERM (it sets `stop`).
        while run.thread is not None and run.thread.is_alive():
            run.thread.join(timeout=0.5)


def _inputs_ready(
    spark: SparkSession, settings: Settings, run: _Run, stop: threading.Event
) -> bool:
    """Wait until the tables the step reads exist; False if `stop` came first."""
    paths = inputs(settings, run.step)
    waited = False
    while not all(tables.exists(spark, path) for path in paths):
        if not waited:
            log.info("%s waits for %s", run.step.task_id, ", ".join(paths))
            waited = True
        if stop.wait(1.0):
            return False
    return True

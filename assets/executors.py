"""The run executor: Dagster's own executors, one chosen per run by `execution: {config: {<executor>: ...}}`.

- `multiprocess` (default): `dagster.multiprocess_executor`, one process per step on the machine
  running the run;
- `in_process`: `dagster.in_process_executor`, every step in the run's process (the document
  sensor asks for it for small change sets, where process start-up would dominate);
- `celery`: `dagster_celery.celery_executor`; each step becomes a task on the broker and runs in a
  Celery worker (`dagster-celery worker start -A dagster_celery.app`) on any machine that reaches
  the broker, the database and the code. The run's process still orchestrates: it claims the
  instance's concurrency-pool slots (the `embedding` pool) before sending a step, so the limit
  holds across every worker.

Each executor's config schema, requirements and executor are the chosen definition's own; this
executor only selects. Setting CHUNKYARD_CELERY_BROKER where the code location loads makes `celery`
the default executor, with that broker and CHUNKYARD_CELERY_BACKEND (default: the broker) as the result
backend, so runs launched by sensors, automation and the UI go to the workers without run config.

A multiprocess step's process is a `multiprocessing` child of the run's process; loading this module
there (every step loads the code location) asks Linux to SIGKILL it when that parent dies
(`die_with_parent`), so a run killed with SIGKILL leaves no step running on as an orphan.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Mapping

from dagster import (
    Executor,
    ExecutorDefinition,
    ExecutorRequirement,
    Field,
    InitExecutorContext,
    Selector,
    executor,
    in_process_executor,
    multiprocess_executor,
)
from dagster_celery import celery_executor

PR_SET_PDEATHSIG = 1  # prctl(2)
BROKER_ENV = "CHUNKYARD_CELERY_BROKER"
BACKEND_ENV = "CHUNKYARD_CELERY_BACKEND"
EXECUTORS: dict[str, ExecutorDefinition] = {
    "multiprocess": multiprocess_executor,
    "in_process": in_process_executor,
    "celery": celery_executor,
}
EXECUTOR_NAMES = tuple(EXECUTORS)


def default_executor_config() -> dict:
    """`{"celery": {...}}` when CHUNKYARD_CELERY_BROKER is set, else `{"multiprocess": {}}`."""
    broker = os.environ.get(BROKER_ENV)
    if not broker:
        return {"multiprocess": {}}
    return {"celery": {"broker": broker, "backend": os.environ.get(BACKEND_ENV) or broker}}


def _chosen(config: Mapping[str, object]) -> tuple[ExecutorDefinition, Mapping[str, object]]:
    ((name, chosen_config),) = config.items()
    return EXECUTORS[name], chosen_config  # type: ignore[return-value]


def _requirements(config: Mapping[str, object]) -> list[ExecutorRequirement]:
    # in_process needs nothing; multiprocess and celery re-load the job elsewhere and need a
    # persistent instance (the workers read and write the same run storage).
    chosen, chosen_config = _chosen(config)
    return list(chosen.get_requirements(chosen_config))


def build_executor() -> ExecutorDefinition:
    """The chunkyard executor definition; its default executor is read from the environment now."""

    @executor(
        name="chunkyard",
        config_schema=Field(
            Selector({name: definition.get_config_field() for name, definition in EXECUTORS.items()}),
            default_value=default_executor_config(),
        ),
        requirements=_requirements,
    )
    def chunkyard_executor(init_context: InitExecutorContext) -> Executor:
        chosen, chosen_config = _chosen(init_context.executor_config)
        return chosen.executor_creation_fn(  # type: ignore[misc]
            InitExecutorContext(
                job=init_context.job,
                executor_def=chosen,
                executor_config=chosen_config,
                instance=init_context.instance,
            )
        )

    return chunkyard_executor


def die_with_parent() -> bool:
    """In a spawned `multiprocessing` child (a multiprocess step) on Linux: SIGKILL when the parent dies.

    Recognised by spawn's `--multiprocessing-fork` in `sys.orig_argv`: spawn restores the parent's
    `sys.argv`, and this module may load while the child is still unpickling, before
    `multiprocessing.parent_process()` is set. Returns whether it was set; exits at once when the
    parent is already gone (the child was re-parented to init).
    """
    spawned = "--multiprocessing-fork" in getattr(sys, "orig_argv", ())
    if not spawned or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() == 1:  # re-parented already: the run's process is gone
        os._exit(1)
    return True


die_with_parent()

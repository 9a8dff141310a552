"""The run executor: multiprocess by default, in-process for small change sets, Celery to scale out.

One executor with three modes, chosen per run by `execution: {config: {<mode>: {...}}}`:

- `multiprocess` (default): one process per step on the machine running the run;
- `in_process`: every step in the run's process (the document sensor asks for it for small
  change sets, where process start-up would dominate);
- `celery`: `dagster_celery`'s executor; each step becomes a task on the broker and runs in a
  Celery worker (`dagster-celery worker start -A dagster_celery.app`) on any machine that reaches
  the broker, the database and the code. The run's process still orchestrates: it claims the
  instance's concurrency-pool slots (the `embedding` pool) before sending a step, so the limit
  holds across every worker.

Setting CHUNKYARD_CELERY_BROKER where the code location loads makes `celery` the default mode,
with that broker and CHUNKYARD_CELERY_BACKEND (default: the broker) as the result backend, so
runs launched by sensors, automation and the UI go to the workers without run config.
"""

from __future__ import annotations

import os

from dagster import Executor, Field, InitExecutorContext, Selector, executor
from dagster._core.definitions.executor_definition import (
    IN_PROC_CONFIG,
    MULTI_PROC_CONFIG,
    _core_in_process_executor_creation,
    _core_multiprocess_executor_creation,
    multiple_process_executor_requirements,
)
from dagster._core.execution.retries import RetryMode
from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor

BROKER_ENV = "CHUNKYARD_CELERY_BROKER"
BACKEND_ENV = "CHUNKYARD_CELERY_BACKEND"
MODES = ("multiprocess", "in_process", "celery")


def default_mode_config() -> dict:
    """`{"celery": {...}}` when CHUNKYARD_CELERY_BROKER is set, else `{"multiprocess": {}}`."""
    broker = os.environ.get(BROKER_ENV)
    if not broker:
        return {"multiprocess": {}}
    return {"celery": {"broker": broker, "backend": os.environ.get(BACKEND_ENV) or broker}}


def _requirements(config: dict) -> list:
    # in_process needs nothing; multiprocess and celery re-load the job elsewhere and need a
    # persistent instance (the workers read and write the same run storage).
    return [] if "in_process" in config else multiple_process_executor_requirements()


def build_executor():
    """The chunkyard executor definition; its default mode is read from the environment now."""

    @executor(
        name="chunkyard",
        config_schema=Field(
            Selector(
                {
                    "multiprocess": MULTI_PROC_CONFIG,
                    "in_process": IN_PROC_CONFIG,
                    "celery": Field(CELERY_CONFIG, description="Steps as tasks for Celery workers."),
                }
            ),
            default_value=default_mode_config(),
        ),
        requirements=_requirements,
    )
    def chunkyard_executor(init_context: InitExecutorContext) -> Executor:
        config = init_context.executor_config
        if "celery" in config:
            celery = config["celery"]
            return CeleryExecutor(
                broker=celery.get("broker"),
                backend=celery.get("backend"),
                include=celery.get("include"),
                config_source=celery.get("config_source"),
                retries=RetryMode.from_config(celery["retries"]),
            )
        if "in_process" in config:
            return _core_in_process_executor_creation(config["in_process"])
        return _core_multiprocess_executor_creation(config["multiprocess"])

    return chunkyard_executor

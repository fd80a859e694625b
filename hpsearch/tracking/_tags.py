"""Every MLflow tag name hpsearch writes or searches by, and the run names, in one place.

The trial-level names double as Optuna user attributes of the same meaning (a trial's
``hpsearch.fail_reason`` is both an attribute in the study and a tag on its run).
"""

from __future__ import annotations

# MLflow's own tags
PARENT_RUN_ID = "mlflow.parentRunId"
RUN_NAME = "mlflow.runName"
#: MLflow 3's UI opens an experiment without a kind in its GenAI (traces) view; this kind
#: makes it open the runs table, with the trials nested under the study's run.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"

# Which study and which trial a run belongs to
STUDY = "hpsearch.study"
ROLE = "hpsearch.role"
#: The value of :data:`ROLE` on the study's parent run.
ROLE_STUDY = "study"
STORAGE = "hpsearch.storage"
TRIAL_NUMBER = "hpsearch.trial_number"
STATE = "hpsearch.state"

# The study's parent run: its setup and summary
SPEC_HASH = "hpsearch.spec_hash"
SAMPLER = "hpsearch.sampler"
PRUNER = "hpsearch.pruner"
N_TRIALS = "hpsearch.n_trials"
BEST_TRIAL = "hpsearch.best_trial"
N_ENDED = "hpsearch.n_ended"
#: Several objectives: the study's Pareto-front trials, by number ("3,7,9"), set at its end.
PARETO_TRIALS = "hpsearch.pareto_trials"

# A trial's run: where and how it ran
WORKER = "hpsearch.worker"
PID = "hpsearch.pid"
DEVICES = "hpsearch.devices"
WORLD_SIZE = "hpsearch.world_size"
#: The start count of a trial: a tag of its run and a user attribute of the Optuna trial
#: (the coordinator reads it when a worker is lost).
ATTEMPT = "hpsearch.attempt"
PRECISION = "hpsearch.precision"
DEVICE_NAME = "hpsearch.device_name"
DEVICE_MEMORY_MIB = "hpsearch.device_memory_mib"
TASK = "hpsearch.task"
N_TRAIN = "hpsearch.n_train"
N_VAL = "hpsearch.n_val"
RESUMED_FROM_EPOCH = "hpsearch.resumed_from_epoch"
PARALLEL = "hpsearch.parallel"  # the trial's layout: ddp, fsdp or pipeline

# A trial's run: how it ended
FAIL_REASON = "hpsearch.fail_reason"
ERROR_TYPE = "hpsearch.error_type"
ERROR_MESSAGE = "hpsearch.error_message"
PRUNE_REASON = "hpsearch.prune_reason"
PRUNE_STEP = "hpsearch.prune_step"
PRUNE_VALUE = "hpsearch.prune_value"
#: Several objectives: whether the trial is on the study's Pareto front (true / false),
#: updated at the end of the study.
PARETO = "hpsearch.pareto"
#: A trial a scheduler paused: the step it waits at (its run is SCHEDULED meanwhile).
PAUSED_AT = "hpsearch.paused_at"
#: A trial that continues another one's checkpoint (population-based training).
PARENT_TRIAL = "hpsearch.parent_trial"
#: The version of the study's spec a trial ran under, and the earlier study's trial whose
#: configuration it took (a warm start's top_k): see hpsearch.carry.
SPEC_VERSION = "hpsearch.spec_version"
TRANSFERRED_FROM = "hpsearch.transferred_from"
#: On the study's run: how the configurations a warm start took ranked among the study's
#: completed trials (the line the run ends with; hpsearch.search._warm_start.outcome).
WARM_START_OUTCOME = "hpsearch.warm_start_outcome"
FROM_EPOCH = "hpsearch.from_epoch"

# A trial stopped by Ctrl-C or SIGTERM: still RUNNING in the study, to resume on the next run.
#: "true" on its MLflow run (ended KILLED) and True as its Optuna user attribute while it
#: waits; the attribute is False again once the trial runs on.
INTERRUPTED = "hpsearch.interrupted"
#: How many times the trial was interrupted (its starts that were not worker losses).
INTERRUPTIONS = "hpsearch.interruptions"
# A trial that yielded its devices on a shared pool to a study with a better claim: still
# RUNNING in the study (its run SCHEDULED), it resumes from its checkpoint when the pool
# grants the study devices again.
#: Why, on its MLflow run and as its Optuna user attribute ("preempted by study X
#: (priority high)"); the attribute stays after it resumes.
PREEMPTED = "hpsearch.preempted"
#: How many times it was preempted.
PREEMPTIONS = "hpsearch.preemptions"
#: The outcome a trial's objective returned (``{"state": "COMPLETE", "values": [...]}``), an
#: Optuna user attribute written before the worker hands it back: a trial the coordinator
#: never heard of ends with it on its next start, without training again.
OUTCOME = "hpsearch.outcome"

#: Longest reason kept in a :data:`FAIL_REASON` tag.
REASON_LIMIT = 5000

#: A trial's run name while it runs, and once it ended.
RUN_NAME_RUNNING = "trial-{number}"
RUN_NAME_ENDED = "trial-{number} {state}"
#: The name of a trial run's record in the backlog folder (one per process and run).
BACKLOG_RECORD = "trial-{number}-{pid}-{run_id:x}.json"


def run_name(trial_number: int, state: str | None = None) -> str:
    """``trial-7`` while it runs, ``trial-7 PRUNED`` once it ended."""
    if state is None:
        return RUN_NAME_RUNNING.format(number=trial_number)
    return RUN_NAME_ENDED.format(number=trial_number, state=state)


def tag_filter(tag: str, value: object) -> str:
    """The MLflow search clause ``tags.`TAG` = 'VALUE'``."""
    return f"tags.`{tag}` = '{value}'"

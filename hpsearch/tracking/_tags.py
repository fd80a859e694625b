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


# Where a name is written: on the study's MLflow run, on a trial's run, as an Optuna user
# attribute of the trial (most trial-level names are both a tag and an attribute).
_STUDY_RUN, _TRIAL_RUN, _ATTR = "study run", "trial run", "trial attribute"
_BOTH = "trial run, trial attribute"

#: Every name above hpsearch writes, with where and what it holds: the documentation's
#: reference is generated from this table (and a test keeps it complete).
TAGS_TABLE: tuple[tuple[str, str, str], ...] = (
    (STUDY, "study run, trial run", "The study's name."),
    (ROLE, "study run", "'study' on the study's parent run."),
    (STORAGE, _STUDY_RUN, "The Optuna storage URL, its password hidden."),
    (SPEC_HASH, _STUDY_RUN, "A hash of the spec the study runs under."),
    (SAMPLER, _STUDY_RUN, "The sampler's name."),
    (PRUNER, _STUDY_RUN, "The pruner's name."),
    (N_TRIALS, _STUDY_RUN, "The budget: search.n_trials."),
    (BEST_TRIAL, _STUDY_RUN, "The best trial's number, set at the end (with best_<metric>)."),
    (N_ENDED, _STUDY_RUN, "Trials ended when the run closed."),
    (PARETO_TRIALS, _STUDY_RUN, "Several objectives: the Pareto-front trials ('3,7,9')."),
    (WARM_START_OUTCOME, _STUDY_RUN, "How a warm start's configurations ranked here."),
    (TRIAL_NUMBER, _TRIAL_RUN, "The Optuna trial number."),
    (STATE, _TRIAL_RUN, "COMPLETE, PRUNED or FAIL (the run's status mirrors it)."),
    (WORKER, _TRIAL_RUN, "The Dask worker's address."),
    (PID, _TRIAL_RUN, "The training process's id."),
    (DEVICES, _TRIAL_RUN, "The trial's device set."),
    (WORLD_SIZE, _TRIAL_RUN, "Rank processes of the trial."),
    (ATTEMPT, _BOTH, "The start count: 1, then one more per lost worker or interruption."),
    (PRECISION, _TRIAL_RUN, "The precision actually used: fp32, bf16 or fp16."),
    (DEVICE_NAME, _TRIAL_RUN, "The device's name."),
    (DEVICE_MEMORY_MIB, _TRIAL_RUN, "The device's memory."),
    (TASK, _TRIAL_RUN, "What the built-in model learns on the data set (classify, ...)."),
    (N_TRAIN, _TRIAL_RUN, "Training examples."),
    (N_VAL, _TRIAL_RUN, "Validation examples."),
    (RESUMED_FROM_EPOCH, _TRIAL_RUN, "The epoch a resumed trial continued after."),
    (PARALLEL, _TRIAL_RUN, "The trial's layout: ddp, fsdp or pipeline."),
    (FAIL_REASON, _BOTH, "Why a trial failed, one line."),
    (ERROR_TYPE, _TRIAL_RUN, "The exception's type (the traceback is traceback.txt)."),
    (ERROR_MESSAGE, _TRIAL_RUN, "The exception's message."),
    (PRUNE_REASON, _BOTH, "Why the pruner or scheduler stopped it, with what it compared."),
    (PRUNE_STEP, _TRIAL_RUN, "The step it was pruned at."),
    (PRUNE_VALUE, _TRIAL_RUN, "Its value at that step."),
    (PARETO, _TRIAL_RUN, "Several objectives: on the Pareto front (true / false), at the end."),
    (PAUSED_AT, _BOTH, "A trial a scheduler paused: the step it waits at."),
    (PARENT_TRIAL, _BOTH, "pbt: the trial whose checkpoint this one continues."),
    (SPEC_VERSION, _BOTH, "The version of the study's spec the trial ran under."),
    (TRANSFERRED_FROM, _BOTH, "Warm start: the earlier study's trial it took its parameters from."),
    (FROM_EPOCH, _BOTH, "A continuation: the epoch it starts from."),
    (INTERRUPTED, _BOTH, "Stopped by Ctrl-C or SIGTERM, to resume on the next run."),
    (INTERRUPTIONS, _BOTH, "How many times it was interrupted."),
    (PREEMPTED, _BOTH, "On a shared pool: why it yielded its devices."),
    (PREEMPTIONS, _BOTH, "How many times it was preempted."),
    (OUTCOME, _ATTR, "The outcome the objective returned, written before it is handed back."),
    ("hpsearch.values.<step>", _ATTR, "Several objectives: the values reported at a step."),
    ("hpsearch.constraints.<step>", _ATTR, "A built-in trial's constraint values at a step."),
    ("hpsearch.target_epoch", _ATTR, "asha / pbt: the epoch a scheduled trial trains to."),
    ("hpsearch.scheduled_starts", _ATTR, "asha / pbt: how many times the trial was resumed."),
)

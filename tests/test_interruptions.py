"""A trial interrupted at any point of its life resumes correctly: the interruption-point
matrix, in this process.

Each case runs a small study's trials as a worker runs them (``run_trial``, the study on a
journal file, MLflow in SQLite) and interrupts trial 0 once, at a named fault point
(:mod:`hpsearch.trial._faults`), by one kind of interruption:

- ``ctrl_c``: the run asks its trials to stop (what the coordinator's first Ctrl-C does);
- ``worker_kill``: the trial's process dies there (an exception no one catches stands for
  the SIGKILL); the trial runs again from its checkpoint, as after a lost worker;
- ``coordinator_kill``: the same, and the trial is found again RUNNING in the study by a new
  coordinator, which runs it again (an outcome handed back is lost with the old one);
- ``pause``: the trial runs under a scheduler's pause at step 2 (then promoted), and its
  process dies at the point.

Then it checks what must be true after any interruption: exactly ``n_trials`` trials ended,
all COMPLETE (none FAIL, none RUNNING), with the values of an uninterrupted run of the same
seeds; every step once in Optuna and in MLflow, one MLflow run per trial; a trial whose last
step was done trains nothing again; after Ctrl-C no step past the next safe point is trained.
The built-in trials' cases are in ``test_interruptions_builtin.py`` (a file of their own, so
that they run beside these); the real-signal cases (a real Ctrl-C of ``hpsearch run``, a
data-parallel worker's SIGKILL) are in ``test_cli.py`` and ``test_ddp.py``.
"""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch.coordinator._interruption import clear_stop, mark_interrupted, request_stop
from hpsearch.search._optuna import storage_of, trial_id_of
from hpsearch.search._space import to_distributions
from hpsearch.spec import StudySpec
from hpsearch.testing import cnn_spec, user_spec
from hpsearch.trial import _faults

from .conftest import mlflow_runs

EPOCHS = 3
N_TRIALS = 2
PAUSE_AT = 2
KINDS = ("ctrl_c", "worker_kill", "coordinator_kill", "pause")
#: (point, step): step None fires at the point's first call.
POINTS = (
    ("before_report", 1),  # before the first report
    ("after_report", 1),  # after a report, before its checkpoint
    ("after_checkpoint", 1),
    ("after_report", EPOCHS),  # after the last epoch's report
    ("after_checkpoint", EPOCHS),  # the last epoch done, its end not told
    ("after_return", None),  # the objective returned; the coordinator did not tell
    ("in_pause", None),
    ("in_resume_load", None),  # (the trial is first killed after its first checkpoint)
)


class Killed(BaseException):
    """The process dies here (nothing of the trial's own code runs after it)."""


def _user_spec() -> StudySpec:
    raw = user_spec(
        "interrupt-user", "hpsearch.testing.objectives:rung_checkpointed", n_trials=N_TRIALS
    )
    raw["objective"]["epochs"] = EPOCHS
    raw["search"]["pruner"] = "none"
    return StudySpec.from_dict(raw)


def _cnn_spec() -> StudySpec:
    raw = cnn_spec("interrupt-cnn", n_trials=N_TRIALS, epochs=EPOCHS, pruner="none")
    raw["objective"]["checkpoint_interval"] = 0
    raw["objective"]["dataset"] = {"name": "digits", "size": 8, "limit": 120}
    raw["objective"]["params"] = {"batch_size": 32, "n_blocks": 1}
    raw["search"]["sampler"] = "random"
    return StudySpec.from_dict(raw)


SPECS = {"user": _user_spec, "cnn": _cnn_spec}


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory):
    """One MLflow store for the module (a new SQLite store costs its migrations), an
    experiment per case."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def _local_trials(tmp_path, spec: StudySpec, uri: str):
    """The study on a journal file and ``send(trial, **task_fields)``: runs the trial in
    this process as a worker would (see ``conftest.local_trials``)."""
    from hpsearch.storage import JOURNAL_PREFIX, ProxyAddress, open_storage
    from hpsearch.tracking import StudyTracker
    from hpsearch.trial import TrialTask
    from hpsearch.worker._runner import run_trial

    url = f"{JOURNAL_PREFIX}{tmp_path / 'optuna.journal'}"
    study = optuna.create_study(
        study_name=spec.name,
        storage=open_storage(url),
        sampler=optuna.samplers.RandomSampler(seed=0),
        direction=spec.direction.value,
    )
    target = StudyTracker(uri, tmp_path.name, spec.name, metric="value", artifact_root=None).open(
        storage_url=url, tags={}, spec_yaml=f"name: {spec.name}\n"
    )
    study_dir = tmp_path / spec.name
    study_dir.mkdir(exist_ok=True)

    def send(trial, **fields):
        task = TrialTask(
            spec.name,
            trial_id_of(trial),
            trial.number,
            spec,
            ProxyAddress("127.0.0.1", 1),
            target,
            str(study_dir),
            [],
            storage_url=url,
            **fields,
        )
        return run_trial(task)

    return study, send


def _run(tmp_path, uri, spec: StudySpec, kind: str | None, point: str | None, step: int | None):
    """Run the study's trials, interrupting trial 0 once; return the study, what each
    attempt of trial 0 reached (a list per attempt) and the tracking URI."""
    study, send = _local_trials(tmp_path, spec, uri)
    study_dir = tmp_path / spec.name
    storage = storage_of(study)
    distributions = to_distributions(spec.space)
    attempts: list[list[tuple[str, int]]] = []
    fired: list[tuple[int, int]] = []  # (attempt, event) where the fault fired
    setup = point == "in_resume_load"  # a resume needs a first interruption

    def hook(at: str, number: int, at_step: int) -> None:
        if number != 0:
            return
        attempts[-1].append((at, at_step))
        nonlocal setup
        if setup and (at, at_step) == ("after_checkpoint", 1):
            setup = False
            raise Killed
        if fired or kind is None or setup or at != point or step not in (None, at_step):
            return
        fired.append((len(attempts) - 1, len(attempts[-1]) - 1))
        if kind == "ctrl_c":
            request_stop(study_dir)
        else:
            raise Killed

    for number in range(N_TRIALS):
        trial = study.ask(distributions)
        trial_id = trial_id_of(trial)
        stop_at = PAUSE_AT if kind == "pause" or point == "in_pause" else None
        resume = False
        outcome: Any = None
        with _faults.injected(hook):
            for _ in range(6):
                if number == 0:
                    attempts.append([])
                try:
                    outcome = send(trial, resume=resume, stop_at=stop_at)
                except Killed:
                    if kind == "coordinator_kill":  # a new coordinator finds it RUNNING
                        again = optuna.load_study(study_name=spec.name, storage=storage)
                        (found,) = again.get_trials(states=(TrialState.RUNNING,))
                        assert found.number == number
                    resume = True
                    continue
                resume = True
                if outcome.state == "INTERRUPTED":  # the coordinator's records, next run
                    mark_interrupted(storage, [trial_id])
                    clear_stop(study_dir)
                elif outcome.state == "PAUSED":
                    assert outcome.last_step == PAUSE_AT
                    stop_at = None  # promoted
                else:
                    break
        if outcome.state == "COMPLETE":
            study.tell(number, values=outcome.values or outcome.value)
        else:
            study.tell(number, state=TrialState.FAIL)
    if kind is not None:
        assert fired, f"the fault at {point} never fired"
    from hpsearch.tracking import flush

    flush(60.0)
    return study, (attempts, fired), tmp_path.name


_baselines: dict[str, dict[int, tuple[list[float], dict[int, float]]]] = {}


def _baseline(
    tmp_path_factory, uri: str, name: str
) -> dict[int, tuple[list[float], dict[int, float]]]:
    """Each trial's values and reports in an uninterrupted run of the same seeds."""
    if name not in _baselines:
        study, _, _ = _run(
            tmp_path_factory.mktemp(f"baseline-{name}"), uri, SPECS[name](), None, None, None
        )
        _baselines[name] = {t.number: (t.values, t.intermediate_values) for t in study.trials}
    return _baselines[name]


def _check(study: optuna.Study, uri: str, experiment: str, spec: StudySpec, baseline: dict) -> None:
    trials = study.get_trials()
    assert len(trials) == N_TRIALS
    assert [t.state for t in trials] == [TrialState.COMPLETE] * N_TRIALS, [
        (t.state, t.user_attrs.get("hpsearch.fail_reason")) for t in trials
    ]
    for t in trials:
        values, reports = baseline[t.number]
        assert t.values == pytest.approx(values, rel=1e-6)
        assert sorted(t.intermediate_values) == list(range(1, EPOCHS + 1))
        assert t.intermediate_values == pytest.approx(reports, rel=1e-6)
    client, runs = mlflow_runs(uri, experiment)
    runs = [r for r in runs if "hpsearch.trial_number" in r.data.tags]  # not the study's
    numbers = sorted(int(r.data.tags["hpsearch.trial_number"]) for r in runs)
    assert numbers == list(range(N_TRIALS)), "one MLflow run per trial"
    for run in runs:
        history = client.get_metric_history(run.info.run_id, spec.metric)
        steps = sorted(m.step for m in history)
        assert steps == list(range(1, EPOCHS + 1)), f"each step once in MLflow: {steps}"
        assert run.info.status == "FINISHED"


def _check_attempts(kind: str, point: str, step: int | None, trace: tuple) -> None:
    attempts, [(attempt, event)] = trace
    ended = point == "after_return" or (point, step) == ("after_checkpoint", EPOCHS)
    if ended and kind != "ctrl_c":  # (after a Ctrl-C there the trial just ends)
        trained = [at for at in attempts[-1] if at[0] == "before_report"]
        assert not trained, f"a trial that had ended trained again: {attempts}"
    if kind == "ctrl_c":
        # The stop takes effect at the next safe point: the end of this epoch (built-in) or
        # the next report (user objective); no step after that is reported by the attempt.
        later = [s for at, s in attempts[attempt][event + 1 :] if at == "after_report"]
        assert len(later) <= 1, f"stopped late: {attempts[attempt]}"


CASES = [(kind, point, step) for kind in KINDS for point, step in POINTS]
# The built-in trials' own code paths (their epoch loop's stop, checkpoint and resume); the
# rest of the matrix is the same runner.
CNN_CASES = [
    ("ctrl_c", "after_report", 1),
    ("worker_kill", "after_checkpoint", EPOCHS),
    ("worker_kill", "in_resume_load", None),
    ("coordinator_kill", "after_return", None),
    ("pause", "in_pause", None),
]


def _id(case: tuple) -> str:
    kind, point, step = case
    return f"{kind}-{point}" + ("" if step is None else f"@{step}")


def interrupt_and_check(tmp_path, tmp_path_factory, uri: str, name: str, case: tuple) -> None:
    """Interrupt ``SPECS[name]``'s trial 0 as ``case`` says, then check the study's end."""
    kind, point, step = case
    spec = SPECS[name]()
    study, attempts, experiment = _run(tmp_path, uri, spec, kind, point, step)
    _check(study, uri, experiment, spec, _baseline(tmp_path_factory, uri, name))
    _check_attempts(kind, point, step, attempts)


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_a_user_objective_interrupted_anywhere_resumes_as_if_it_never_was(
    tmp_path, tmp_path_factory, tracking_uri, case
):
    interrupt_and_check(tmp_path, tmp_path_factory, tracking_uri, "user", case)

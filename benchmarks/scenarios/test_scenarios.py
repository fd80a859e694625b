"""Each scenario here widens a test of the suite: the same parts and checks at full size, or
the variants the suite leaves to one case (see each docstring)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from optuna.trial import TrialState

from hpsearch import Study
from hpsearch.search.schedulers import FROM_EPOCH, PARENT_TRIAL
from hpsearch.testing import user_spec
from tests import test_fsdp as fsdp_tests
from tests import test_pbt as pbt_tests
from tests import test_pool as pool_tests
from tests import test_tls as tls_tests
from tests.conftest import free_port, spawn_ranks
from tests.test_fsdp import LOSS_RTOL
from tests.test_packing import pack_one_slot
from tests.test_scale_out import (
    test_postgres_study_across_cli_started_workers_and_an_mlflow_server_on_postgres as scale_out,
)
from tests.test_storage_stress import stress_the_journal
from tests.test_views import NOTEBOOKS, execute_notebook

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def notebook_runs(tmp_path_factory):
    """One runs folder for the notebooks, as for a user who runs them in order in one
    folder: the analysis notebook reads the quickstart's study when it is there (and runs it
    first when it is not, as when it runs alone)."""
    return tmp_path_factory.mktemp("notebook-runs")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_notebook_runs_top_to_bottom(path, tmp_path, monkeypatch, notebook_runs):
    """All the notebooks, in order, in one folder (the suite runs the quickstart alone)."""
    execute_notebook(path, tmp_path, monkeypatch, notebook_runs)


def test_the_journal_holds_2000_trials_behind_the_proxy(tmp_path):
    """The suite's journal stress test at 2,000 trials instead of 400."""
    stress_the_journal(tmp_path, 2000)


def test_workers_write_straight_to_postgres(database, tmp_path, run_dir, monkeypatch):
    """The suite's PostgreSQL study with its workers on the database itself, no proxy."""
    scale_out("direct", database, tmp_path, run_dir, monkeypatch)


def test_the_transformer_shards_too(tmp_path):
    """The transformer language model under fsdp: the losses of one rank, half the bytes
    (the suite shards the cnn)."""

    from hpsearch.testing.families import fsdp_case_rank, train_briefly
    from hpsearch.training._fsdp import param_bytes

    spawn_ranks(fsdp_case_rank, str(tmp_path), "transformer")
    ranks = [json.loads((tmp_path / f"fsdp-transformer-rank{r}.json").read_text()) for r in (0, 1)]
    alone = train_briefly("transformer", epochs=2)
    for key in ("train_loss", "val_loss", "val_perplexity"):
        assert [e[key] for e in ranks[0]["epochs"]] == pytest.approx(
            [e[key] for e in alone["epochs"]], rel=LOSS_RTOL
        ), key
    full = param_bytes([alone["trainer"].model])
    assert max(r["param_bytes"] for r in ranks) <= 0.55 * full


def test_four_trials_share_one_slot_and_the_one_over_its_quarter_fails_alone(run_dir):
    """The suite's packing test four to a slot: the trial of 4 MiB over its 2 MiB fails
    alone, its three neighbours complete, all four at once."""
    pack_one_slot(run_dir, "1/4", "8MiB", [4, 8, 16, 64])


def test_a_killed_worker_resumes_its_fsdp_trial_from_the_sharded_checkpoint(
    run_dir, two_slot_client
):
    """An fsdp trial whose worker is killed two epochs in resumes from its sharded
    checkpoint and trains each epoch once (the suite resumes a sharded checkpoint without
    a kill, and kills the workers of plain trials)."""
    import signal
    import threading
    import time

    name = "fsdp-kill"
    spec = fsdp_tests._cnn(name, 2, "fsdp", epochs=8)
    spec["objective"]["dataset"] = "digits"
    study = Study(spec, run_dir=run_dir, client=two_slot_client)
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(result=study.run()), daemon=True)
    thread.start()
    marker = run_dir / name / "checkpoints" / "trial-0.dcp" / "COMPLETE.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        journal = run_dir / name / "optuna.journal"
        if marker.exists() and journal.exists():
            trials = fsdp_tests._study(run_dir, name).trials
            if trials and len(trials[0].intermediate_values) >= 2:
                break
        time.sleep(0.1)
    else:
        pytest.fail("no trial two epochs in with a sharded checkpoint")
    (pid,) = two_slot_client.run(os.getpid).values()
    os.kill(pid, signal.SIGKILL)
    thread.join(timeout=240)
    assert "result" in box, "the study goes on and ends"
    (trial,) = fsdp_tests._study(run_dir, name).trials
    assert trial.state == TrialState.COMPLETE, trial.user_attrs
    assert trial.user_attrs["hpsearch.attempt"] == 2
    assert sorted(trial.intermediate_values) == list(range(1, 9))
    client, (run,) = fsdp_tests._run(run_dir, name)
    assert int(run.data.tags["hpsearch.resumed_from_epoch"]) >= 1, "from the checkpoint"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")]
    assert sorted(steps) == list(range(1, 9)), "every epoch exactly once"


@pytest.mark.slow
def test_a_killed_worker_resumes_a_continuation(run_dir):
    """The worker running a continuation is killed after its pause (the suite kills the
    workers of plain trials, and stops a population's coordinator): it runs again from its
    own checkpoint, counted as one lost worker (its start after the pause is not one), and
    the study ends with every line complete and nothing RUNNING."""
    import os
    import signal
    import threading
    import time

    from distributed import Client

    from hpsearch.cluster import start_local_cluster

    name = "pbt-kill"
    spec = pbt_tests._pbt_spec(name, n_trials=3, population=2)
    spec["objective"]["params"] = {"step_s": 0.7}
    # One retry: the continuation's start after its pause at epoch 4 is not a lost worker.
    spec["search"]["max_retries"] = 1
    cluster = start_local_cluster(n_workers=2, gpus_per_trial=1)
    client = Client(cluster)
    try:
        box: dict = {}
        thread = threading.Thread(
            target=lambda: box.update(result=Study(spec, run_dir=run_dir, client=client).run()),
            daemon=True,
        )
        thread.start()
        deadline = time.monotonic() + 180
        victim = None
        while victim is None and time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                trials = pbt_tests._study(run_dir, name).get_trials(deepcopy=False)
            except (KeyError, FileNotFoundError):  # the study is not created yet
                continue
            victim = next(
                (
                    t
                    for t in trials
                    if PARENT_TRIAL in t.user_attrs
                    and t.state == TrialState.RUNNING
                    and 5 in t.intermediate_values  # after its pause at epoch 4
                ),
                None,
            )
        assert victim is not None, "a continuation resumed after its pause"
        for address, keys in client.processing().items():
            if any(f"-trial-{victim.number}-" in str(k) for k in keys):
                os.kill(client.run(os.getpid, workers=[address])[address], signal.SIGKILL)
                break
        else:
            pytest.fail(f"no worker runs trial {victim.number}")
        thread.join(timeout=300)
        assert "result" in box, "the study goes on and ends"
    finally:
        client.close()
        cluster.close(timeout=20)
    study = pbt_tests._study(run_dir, name)
    child = study.trials[victim.number]
    # Started at epoch 2, resumed after epoch 4 (a scheduled start), retried once.
    assert child.user_attrs["hpsearch.attempt"] == 3
    assert child.user_attrs["hpsearch.scheduled_starts"] == 1
    assert child.state == TrialState.COMPLETE
    epoch = child.user_attrs[FROM_EPOCH]
    assert sorted(child.intermediate_values) == list(range(epoch + 1, 7))
    assert child.user_attrs[f"loaded_{epoch}"]["trial"] == child.user_attrs[PARENT_TRIAL]
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
    assert sum(t.state == TrialState.COMPLETE for t in study.trials) == 2


def test_tls_scheduler_and_workers_from_the_cli(tmp_path, run_dir):
    """A TLS scheduler and worker started by the command line, a study on them, and a client
    without the certificates refused (the suite runs the local cluster with TLS)."""
    from tests.test_multinode import start_scheduler, start_worker, stop_processes

    tls = tls_tests._certificates(tmp_path)
    port = free_port()
    address = f"tls://127.0.0.1:{port}"
    flags = ["--tls-ca-file", tls["ca_file"], "--tls-cert", tls["cert"], "--tls-key", tls["key"]]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = [start_scheduler(port, env, "--protocol", "tls", *flags)]
    try:
        procs.append(start_worker(address, env, "secure", *flags))
        from types import SimpleNamespace

        from distributed import Client

        from hpsearch.cluster._base import security

        with Client(address, timeout=60, security=security(SimpleNamespace(**tls))) as client:
            client.wait_for_workers(1, timeout=90)
        spec = user_spec("secure", "hpsearch.testing.objectives:staircase", n_trials=3)
        spec["cluster"] = {"address": address, "tls": tls}
        result = Study(spec, run_dir=run_dir).run(progress=False)
        assert result.progress.ended == 3 and result.progress.failed == 0
        assert tls_tests._refused(address), "a client without the certificates is refused"
    finally:
        stop_processes(procs)


def test_a_killed_coordinator_loses_its_leases_and_its_rerun_finishes(pool, tmp_path) -> None:
    """``hpsearch run`` on the pool, SIGKILLed while its trials run: its leases expire within
    seconds (no heartbeat), its trials stop at their next report on the pool's workers (their
    study is gone), and the same command again resumes them from their checkpoints (the
    suite expires a silent study's leases in the arbiter, and kills a plain study's
    coordinator)."""
    folder, address = pool
    run_dir = tmp_path / "runs"
    path = pool_tests._study_file(tmp_path, "doomed", address, 3, weight=2.0, priority="high")
    doomed = pool_tests._run(path, run_dir, step_s=1.0)
    try:
        state = pool_tests._wait_for(
            folder,
            lambda s: pool_tests._held(s).get("doomed") == 3,
            "doomed holds 3",
            procs={"doomed": doomed},
        )
        (study,) = state["studies"]
        assert (study["priority"], study["weight"]) == ("high", 2.0)
        while not list((run_dir / "doomed").glob("notes-*")):  # a step in
            time.sleep(0.2)
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(30)
    finally:
        doomed.kill()
    pool_tests._wait_for(folder, lambda s: not s["studies"], "the killed study's leases", 60)
    state = pool_tests.status(folder)
    assert state["free"] == 4 and state["expired"][0] == "doomed"

    again = pool_tests._run(path, run_dir, step_s=0.3)
    out, _ = again.communicate(timeout=240)
    assert again.returncode == 0, out
    trials = pool_tests._trials(run_dir, "doomed")
    assert len(trials) == 3 and all(t.state.name == "COMPLETE" for t in trials), out
    assert all(sorted(t.intermediate_values) == list(range(1, 9)) for t in trials)
    assert any(t.user_attrs.get("hpsearch.attempt", 1) > 1 for t in trials), "resumed"

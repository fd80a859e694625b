"""Several studies on one simulated pool: the pool's own arbitration on virtual time, each
study's coordinator leasing devices, trials yielding at an epoch end when asked."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from hpsearch.simulation import benchmark
from hpsearch.simulation._pool import simulate_pool
from hpsearch.spec import StudySpec


def _spec(name: str, weight: float = 1.0, priority: str = "normal", n: int = 200) -> StudySpec:
    return StudySpec.from_dict(
        {
            "name": name,
            "objective": {"model": "synthetic", "epochs": 9},
            "search": {"n_trials": n, "sampler": "random", "pruner": "none", "seed": 0},
            "share": {"weight": weight, "priority": priority},
            "cluster": {"backend": "simulated"},
        }
    )


def _every_step_once(study, epochs=9):
    bench = benchmark("synthetic")
    for trial in study.get_trials(deepcopy=False):
        assert trial.state == TrialState.COMPLETE, trial.number
        assert sorted(trial.intermediate_values) == list(range(1, epochs + 1))
        curve = bench.curve(trial.params, "a", epochs)
        assert [trial.intermediate_values[s] for s in range(1, epochs + 1)] == pytest.approx(
            list(curve.values)
        )


def test_three_studies_share_64_devices_by_weight():
    specs = [_spec("a", 1), _spec("b", 2), _spec("c", 1)]
    out = simulate_pool(specs, workers=64)
    again = simulate_pool(specs, workers=64)
    assert out.held == again.held, "the same inputs give the same trace"
    # While all three want more than their share, they hold it: 16, 32, 16 devices, from
    # their first looks at the pool (each claims all it could use at once) until the first
    # study nears its end (its last trials, some 40 s long, finish one after the other).
    busy = [h for t, h in out.held if 10 <= t < min(out.ends) - 40]
    assert len(busy) >= 5
    assert all(h == {"a": 16.0, "b": 32.0, "c": 16.0} for h in busy), busy
    for study in out.studies:
        assert len(study.trials) == 200
        _every_step_once(study)


def test_a_high_priority_study_takes_devices_at_the_next_epoch_end():
    specs = [_spec("low", 1), _spec("urgent", 1, "high", n=60)]
    out = simulate_pool(specs, arrivals=[0.0, 60.0], workers=16)
    # The urgent study arrives at 60 s: within an epoch end of the low one's trials (it asks
    # for all it could use at once), it holds the whole pool, which it wants; the low study
    # gets it back as the urgent one's last trials end.
    after = [h for t, h in out.held if 70 <= t < out.ends[1] - 40]
    assert after and all(h.get("urgent") == 16.0 for h in after), after
    low = out.studies[0]
    preempted = [t for t in low.trials if t.user_attrs.get("hpsearch.preemptions")]
    assert preempted, "some of the low study's trials yielded"
    assert all("priority high" in t.user_attrs["hpsearch.preempted"] for t in preempted)
    for study in out.studies:
        _every_step_once(study)

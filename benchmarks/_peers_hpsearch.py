"""hpsearch's side of ``benchmarks/peers.py``: the user objective and the study file.

The objective is what a user writes (``def objective(trial, ctx)``): it reads its
configuration index with ``trial.suggest_int`` (the study's grid sampler hands out each
index once), resumes from ``ctx.load_checkpoint()``, and after each epoch reports the
validation accuracy and saves its checkpoint with ``ctx.save_checkpoint`` before asking
``trial.should_prune()`` (the two calls ``search.scheduler: asha`` needs).
"""

from __future__ import annotations

from typing import Any

from _peers_model import DigitsTrial, configs

#: The study, as a user writes it: ``{configs}``, ``{epochs}``, ``{scheduler}``, ``{name}``.
STUDY = """\
name: {name}
objective:
  model: "_peers_hpsearch:objective"
  metric: value
  direction: maximize
  epochs: {epochs}
  checkpoint_interval: 0
  params: {{configs: {configs}}}
space:
  config: {{type: int, low: 0, high: {last}}}
search:
  n_trials: {configs}
  sampler: grid
  seed: 0
  pruner: none
  scheduler: {scheduler}
  asha: {{min_epochs: 1, reduction_factor: 3, brackets: 1}}
cluster: {{n_workers: 2, gpus: none, slots: 2}}
"""


def study_yaml(name: str, n_configs: int, epochs: int, scheduler: str) -> str:
    return STUDY.format(
        name=name, configs=n_configs, last=n_configs - 1, epochs=epochs, scheduler=scheduler
    )


def objective(trial: Any, ctx: Any) -> float:
    import optuna

    n_configs = int(ctx.spec.objective.params["configs"])
    index = trial.suggest_int("config", 0, n_configs - 1)
    run = DigitsTrial(configs(n_configs)[index])
    state = ctx.load_checkpoint()
    first = 1
    if state is not None:
        run.load(state)
        first = int(state["epoch"]) + 1
    value = float("nan")
    for epoch in range(first, ctx.spec.objective.epochs + 1):
        run.train_epoch(epoch)
        value = run.evaluate()
        trial.report(value, epoch)
        ctx.save_checkpoint({"epoch": epoch, **run.state()}, epoch)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return value

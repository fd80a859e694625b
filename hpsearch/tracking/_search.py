"""Finding a study's trial runs: by trial number, across all pages of a search."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpsearch.tracking import _tags as tag
from hpsearch.tracking._client import TrackingTarget

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run


def find_trial_runs(
    client: MlflowClient, target: TrackingTarget, *, trial_numbers: list[int] | None = None
) -> dict[int, Run]:
    """The child runs of a study, by trial number (the newest one where there are several)."""
    filt = tag.tag_filter(tag.PARENT_RUN_ID, target.parent_run_id)
    if trial_numbers is not None and len(trial_numbers) == 1:
        filt += " and " + tag.tag_filter(tag.TRIAL_NUMBER, trial_numbers[0])
    return runs_by_trial(client, target.experiment_id, filt)


def runs_by_trial(client: MlflowClient, experiment_id: str, filter_string: str) -> dict[int, Run]:
    """The runs matching ``filter_string`` that belong to a trial, by trial number (all pages;
    the newest run where a trial has several)."""
    runs: dict[int, Run] = {}
    token = None
    while True:
        page = client.search_runs(
            [experiment_id],
            filter_string=filter_string,
            max_results=1000,
            page_token=token,
            order_by=["attributes.start_time ASC"],
        )
        for run in page:
            number = run.data.tags.get(tag.TRIAL_NUMBER)
            if number is not None:
                runs[int(number)] = run
        token = page.token
        if not token:
            return runs

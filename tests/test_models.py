"""The model zoo: every family learns, in fp32 and under bf16 autocast, and under DDP."""

from __future__ import annotations

import collections
import json
import math

import pytest
import torch

from hpsearch.data import load_dataset
from hpsearch.testing.families import CASES, train_briefly
from hpsearch.training._gan import median_bandwidth, mmd2, to_unit_range

from .conftest import spawn_ranks


def majority_accuracy(data) -> float:
    counts = collections.Counter(data.y_train.tolist())
    top = counts.most_common(1)[0][0]
    return float((data.y_val == top).float().mean())


def unigram_perplexity(data) -> float:
    """The perplexity of predicting each character by its training frequency (add-one)."""
    vocab = data.info["vocab_size"]
    counts = torch.bincount(data.x_train.flatten(), minlength=vocab).double() + 1.0
    logp = (counts / counts.sum()).log()
    return math.exp(-float(logp[data.x_val[:, 1:].flatten()].mean()))


def noise_mmd(data) -> float:
    real = to_unit_range(data.x_val[:512], 0.0, 1.0).flatten(1)
    noise = torch.rand(real.shape, generator=torch.Generator().manual_seed(1)) * 2 - 1
    return mmd2(noise, real, median_bandwidth(real))


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("case", list(CASES))
def test_family_learns_and_beats_a_trivial_baseline(case, precision):
    run = train_briefly(case, precision)
    first, last, data = run["epochs"][0], run["epochs"][-1], run["data"]
    if case == "gan":
        assert last["d_loss"] > 0 and last["g_loss"] > 0
        assert math.isfinite(last["val_mmd"])
        assert last["val_mmd"] < run["before"]["val_mmd"] * 0.2, "the generator learned"
        assert last["val_mmd"] < noise_mmd(data) * 0.5, "generated digits beat uniform noise"
        return
    assert last["train_loss"] < first["train_loss"], "the training loss goes down"
    if data.task == "language_model":
        baseline = unigram_perplexity(data)
        assert last["val_perplexity"] < 0.75 * baseline, (last["val_perplexity"], baseline)
    else:
        baseline = majority_accuracy(data)
        margin = 0.25 if data.info["n_classes"] == 2 else 0.4
        assert last["val_accuracy"] > baseline + margin, (last["val_accuracy"], baseline)


def test_gan_metric_ranks_real_data_above_noise():
    data = load_dataset("digits", seed=0)
    real_val = to_unit_range(data.x_val[:512], 0.0, 1.0).flatten(1)
    real_train = to_unit_range(data.x_train[:512], 0.0, 1.0).flatten(1)
    bandwidth = median_bandwidth(real_val)
    real = mmd2(real_train, real_val, bandwidth)
    noise = noise_mmd(data)
    blurred = mmd2(real_val.mean(0, keepdim=True).expand_as(real_val), real_val, bandwidth)
    assert abs(real) < 0.02 < noise
    assert real < blurred < noise


def test_gan_logs_a_sample_grid():
    run = train_briefly("gan", epochs=1)
    grid = run["trainer"].sample_grid()
    assert grid.dtype.name == "uint8" and grid.ndim == 3 and grid.shape[2] == 3
    assert grid.shape[0] == grid.shape[1] > 8 * 8
    assert grid.std() > 10, "not a blank picture"


def test_rnn_uses_one_sigmoid_output_for_two_classes():
    from hpsearch.models import get_family

    data = load_dataset({"name": "docs-or-code", "per_class": 50}, seed=0)
    model = get_family("rnn").build({}, data)
    assert model(data.x_train[:3]).shape == (3, 1)
    model = get_family("rnn").build({}, load_dataset("digits-seq", seed=0))
    assert model(load_dataset("digits-seq", seed=0).x_train[:3]).shape == (3, 10)


def test_lstm_under_cpu_bf16_autocast_runs_forward_and_backward():
    from hpsearch.models import get_family

    data = load_dataset({"name": "python-docs", "max_chars": 5000}, seed=0)
    model = get_family("lstm").build({"num_layers": 2}, data)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(data.x_train[:2, :32])
    out.float().sum().backward()
    assert out.shape == (2, 32, data.info["vocab_size"])
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.slow
def test_every_family_trains_with_two_gloo_ranks(tmp_path):

    from hpsearch.testing.families import ddp_rank

    cases = list(CASES)
    spawn_ranks(ddp_rank, str(tmp_path), cases)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for case in cases:
        zero, one = ranks[0][case], ranks[1][case]
        assert zero["checksum"] == pytest.approx(one["checksum"], rel=1e-9, abs=1e-9), (
            f"{case}: ranks in sync"
        )
        same = [{k: v for k, v in e.items() if k != "samples_per_s"} for e in zero["epochs"]]
        assert same == [
            {k: v for k, v in e.items() if k != "samples_per_s"} for e in one["epochs"]
        ], f"{case}: both ranks report the same reduced metrics"
        key = "val_mmd" if case == "gan" else "train_loss"
        assert len(zero["epochs"]) == 2 and all(key in e for e in zero["epochs"])
        if case != "gan":
            assert zero["epochs"][1]["train_loss"] < zero["epochs"][0]["train_loss"], case


@pytest.mark.parametrize("case", list(CASES))
def test_a_resumed_trainer_continues_exactly(case, tmp_path):
    """Checkpoint after epoch 2, restore into a fresh model: epoch 3 is as without the break."""
    from hpsearch.trial._checkpoint import CheckpointStore

    straight = train_briefly(case, epochs=3)
    first = train_briefly(case, epochs=2)
    store = CheckpointStore(tmp_path, 0)
    store.save(
        {"epoch": 2, "value": 0.0, "trainer": first["trainer"].state_dict()}, background=False
    )
    resumed = train_briefly(case, epochs=0)
    resumed["trainer"].load_state_dict(store.load()["trainer"])
    trainer, data = resumed["trainer"], resumed["data"]
    metrics = trainer.train_epoch(data, 3)
    metrics.update(trainer.evaluate(data))
    expected = straight["epochs"][2]
    for key, value in metrics.items():
        if key not in ("samples_per_s",):
            assert value == pytest.approx(expected[key], rel=1e-6, abs=1e-9), key


@pytest.mark.parametrize("n", [1, 2, 3])
def test_transformer_stages_compose_to_the_whole_model(n):
    from hpsearch.models import TransformerLM, get_family

    torch.manual_seed(0)
    model = TransformerLM(30, width=16, depth=2, heads=2, max_len=8).eval()
    x = torch.randint(0, 30, (2, 8))
    stages = get_family("transformer").stages(model, n)
    assert len(stages) == n
    out = x
    for stage in stages:
        out = stage(out)
    assert torch.equal(out, model(x))
    params = [id(p) for s in stages for p in s.parameters()]
    assert sorted(params) == sorted(id(p) for p in model.parameters()), "shared, each once"
    with pytest.raises(ValueError, match="1 to 3 stages"):
        model.stages(4)


def test_transformer_attention_is_causal():
    from hpsearch.models import TransformerLM

    torch.manual_seed(0)
    model = TransformerLM(30, width=16, depth=2, heads=2, max_len=8).eval()
    x = torch.randint(0, 30, (1, 8))
    y = x.clone()
    y[0, 5:] = (y[0, 5:] + 1) % 30
    assert torch.allclose(model(x)[0, :5], model(y)[0, :5]), "no peeking at later tokens"

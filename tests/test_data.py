"""Data sets: the built-ins, the user's own files and functions, one-line errors for bad ones."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch

from hpsearch.data import load_dataset
from hpsearch.exceptions import SpecError
from hpsearch.spec import StudySpec

SPACE = {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}}


def spec_with(dataset, model="cnn", source=None, **objective):
    data = {
        "name": "d",
        "objective": {"model": model, "dataset": dataset, **objective},
        "space": SPACE,
    }
    return StudySpec.from_dict(data, source=source)


def error_of(dataset, model="cnn", source=None, **objective) -> str:
    with pytest.raises(SpecError) as info:
        spec_with(dataset, model, source, **objective)
    lines = str(info.value).splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_builtin_data_sets_describe_themselves():
    digits = load_dataset("digits", seed=0)
    assert digits.info["kind"] == "image" and digits.x_train.shape[1:] == (1, 8, 8)
    assert digits.n_train + digits.n_val == 1797
    seq = load_dataset("digits-seq", seed=0)
    assert seq.info["kind"] == "sequence" and seq.x_train.shape[1:] == (8, 8)
    assert torch.equal(seq.x_train, digits.x_train.squeeze(1)), "the same images, read by rows"
    docs = load_dataset("python-docs", seed=0)
    assert docs.task == "language_model" and docs.y_train is None
    assert docs.info["n_chars"] > 100_000 and docs.info["vocab_size"] > 50
    both = load_dataset("docs-or-code", seed=0)
    assert both.info["n_classes"] == 2
    labels = torch.cat([both.y_train, both.y_val])
    assert (labels == 0).sum() == (labels == 1).sum(), "balanced classes"


def test_the_split_is_fixed_by_the_seed():
    a, b, c = (
        load_dataset({"name": "digits", "size": 8, "val_fraction": 0.25}, seed=s) for s in (3, 3, 4)
    )
    assert torch.equal(a.x_val, b.x_val) and not torch.equal(a.x_val, c.x_val)
    assert a.n_val == round(1797 * 0.25)


def test_resized_digits():
    assert load_dataset({"name": "digits", "size": 16}, seed=0).x_train.shape[1:] == (1, 16, 16)


def test_default_metric_follows_the_task():
    assert spec_with("python-docs", model="lstm").metric == "val_perplexity"
    assert spec_with("python-docs", model="lstm").direction.value == "minimize"
    assert spec_with("digits-seq", model="lstm").metric == "val_accuracy"
    assert spec_with("digits", model="gan").metric == "val_mmd"
    assert spec_with("digits", model="gan").direction.value == "minimize"


# ----------------------------------------------------------------------------- user data


def _digits_npz(path, *, classes=(0, 1), with_val=False):
    from sklearn.datasets import load_digits

    d = load_digits()
    keep = np.isin(d.target, classes)
    x, y = (d.images[keep] / 16.0).astype(np.float32), d.target[keep].astype(np.int64)
    arrays = {"x": x, "y": y}
    if with_val:
        arrays = {"x": x[:300], "y": y[:300], "x_val": x[300:], "y_val": y[300:]}
    np.savez(path, **arrays)
    return path


def test_npz_file_next_to_the_study_file(tmp_path, monkeypatch):
    _digits_npz(tmp_path / "pairs.npz", with_val=True)
    study = tmp_path / "study.yaml"
    study.write_text("placeholder")
    monkeypatch.chdir("/")
    spec = spec_with({"path": "pairs.npz"}, model="rnn", source=study)
    data = load_dataset(spec.objective.dataset, seed=0, source=spec.source)
    assert data.info["kind"] == "sequence" and data.info["n_classes"] == 2
    assert data.n_train == 300 and data.n_val == len(data.y_val) > 0, (
        "x_val and y_val are used as given"
    )


def test_rnn_learns_a_two_class_npz_with_a_sigmoid(tmp_path):
    from hpsearch.models import get_family
    from hpsearch.training._trainers import make_trainer

    path = _digits_npz(tmp_path / "zero-one.npz")
    data = load_dataset({"path": str(path)}, seed=0)
    family = get_family("rnn")
    model = family.build({}, data)
    trainer = make_trainer(
        family, model, {"lr": 1e-2}, data, device=torch.device("cpu"), precision="fp32", seed=0
    )
    for epoch in (1, 2, 3):
        trainer.train_epoch(data, epoch)
    assert trainer.evaluate(data)["val_accuracy"] > 0.95


def test_text_corpus_file_for_a_language_model(tmp_path):
    from hpsearch.data._text import python_docs_text

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(python_docs_text()[:20000], encoding="utf-8")
    spec = spec_with({"path": str(corpus), "block": 129}, model="lstm")
    assert spec.metric == "val_perplexity"
    data = load_dataset(spec.objective.dataset, seed=0)
    assert data.task == "language_model" and data.x_train.shape[1] == 129


def test_function_returning_torch_data_sets(tmp_path, monkeypatch):
    (tmp_path / "my_data.py").write_text(
        textwrap.dedent("""
        import torch
        from torch.utils.data import TensorDataset

        def pairs(seed=0):
            g = torch.Generator().manual_seed(seed)
            x = torch.randn(200, 1, 6, 6, generator=g)
            y = (x.mean(dim=(1, 2, 3)) > 0).long()
            return TensorDataset(x[:150], y[:150]), TensorDataset(x[150:], y[150:])
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = spec_with("my_data:pairs")
    data = load_dataset(spec.objective.dataset, seed=0)
    assert data.info["kind"] == "image" and data.n_train == 150 and data.n_val == 50
    assert data.info["n_classes"] == 2


@pytest.mark.parametrize(
    ("make", "field", "words"),
    [
        (lambda p: p / "missing.npz", "objective.dataset.path", ["no such file"]),
        (
            lambda p: (p / "bad.npz").write_bytes(b"not a zip") and p / "bad.npz",
            "objective.dataset.path",
            ["not a readable .npz"],
        ),
        (
            lambda p: np.savez(p / "noy.npz", x=np.zeros((4, 3))) or p / "noy.npz",
            "objective.dataset.path",
            ["no array 'y'", "it holds: x"],
        ),
        (
            lambda p: (
                np.savez(p / "len.npz", x=np.zeros((4, 3, 3)), y=np.zeros(5, dtype=int))
                or p / "len.npz"
            ),
            "objective.dataset.path",
            ["x has 4 samples but y has 5"],
        ),
        (
            lambda p: (
                np.savez(p / "float.npz", x=np.zeros((4, 3, 3)), y=np.zeros(4)) or p / "float.npz"
            ),
            "objective.dataset.path",
            ["1-D array of class ids"],
        ),
        (
            lambda p: (p / "data.csv").write_text("1,2") and p / "data.csv",
            "objective.dataset.path",
            [".npz", ".txt"],
        ),
        (
            lambda p: (p / "short.txt").write_text("tiny") and p / "short.txt",
            "objective.dataset.path",
            ["at least 1000 characters"],
        ),
    ],
)
def test_bad_data_files_give_one_line(tmp_path, make, field, words):
    path = make(tmp_path)
    line = error_of({"path": str(path)}, model="rnn" if str(path).endswith("npz") else "lstm")
    assert line.startswith(f"<study>: {field}: "), line
    for word in words:
        assert word in line, line


@pytest.mark.parametrize(
    ("dataset", "model", "objective", "field", "words"),
    [
        (
            "python-docs",
            "cnn",
            {},
            "objective.dataset",
            ["'cnn' cannot train on 'python-docs'", "language model"],
        ),
        ("docs-or-code", "cnn", {}, "objective.dataset", ["inputs are tokens", "image, sequence"]),
        ("python-docs", "gan", {}, "objective.dataset", ["'gan' cannot train"]),
        (
            "digits",
            "cnn",
            {"metric": "val_perplexity"},
            "objective.metric",
            ["does not report 'val_perplexity'", "val_accuracy, val_loss"],
        ),
        ("digits", "gan", {"metric": "val_accuracy"}, "objective.metric", ["val_mmd"]),
        (
            {"name": "digits", "sise": 16},
            "cnn",
            {},
            "objective.dataset.sise",
            ["did you mean 'size'"],
        ),
        ({"name": "digitz"}, "cnn", {}, "objective.dataset.name", ["unknown dataset 'digitz'"]),
        ({"size": 16}, "cnn", {}, "objective.dataset", ["needs 'name'", "'path'"]),
        (
            "nowhere_pkg.mod:fn",
            "cnn",
            {},
            "objective.dataset",
            ["cannot import 'nowhere_pkg.mod:fn'"],
        ),
    ],
)
def test_data_that_does_not_fit_the_model_is_refused(dataset, model, objective, field, words):
    line = error_of(dataset, model=model, **objective)
    assert line.startswith(f"<study>: {field}: "), line
    for word in words:
        assert word in line, line


def test_cli_names_the_study_file_for_a_bad_data_file(tmp_path):
    import subprocess
    import sys

    study = tmp_path / "mine.yaml"
    study.write_text(
        "name: mine\nobjective: {model: rnn, dataset: {path: gone.npz}}\n"
        "space: {lr: {type: float, low: 0.001, high: 0.01}}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "hpsearch.cli", "validate", str(study)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: {study}: objective.dataset.path: 'gone.npz': no such file"
    ), proc.stderr
    assert "Traceback" not in proc.stderr

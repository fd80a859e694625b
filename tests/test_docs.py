"""The documentation site: it builds with warnings as errors, it renders in a browser and
its search finds pages, its reference says what the code says, and every example in it runs.

Conventions of docs/ that these tests hold:

- A YAML block is a study file or a part of one (validated: a part is merged into a small
  cnn study first); ``:class: not-a-study`` marks other YAML (a Prometheus config).
- A shell block (bash, console) runs here, line by line from the repository root, unless
  its class names what this machine may lack: ``needs-gpu``, ``needs-slurm``,
  ``needs-kubernetes``, ``needs-nodes`` (several machines), ``needs-postgres``,
  ``needs-server`` (a server that runs until stopped), ``runs-a-study`` (minutes of
  training: the studies themselves are run by tests/test_studies.py). Every ``hpsearch``
  line, run or not, names a real command and real options, and its study files validate.
- A Python block runs, in a folder where the quickstart study has run.
"""

from __future__ import annotations

import copy
import http.server
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)
MARKS = {
    "needs-gpu",
    "needs-slurm",
    "needs-kubernetes",
    "needs-nodes",
    "needs-postgres",
    "needs-server",
    "runs-a-study",
}
SPHINX = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
FENCE = re.compile(r"^(```+)\s*(\{code-block\}\s*)?([\w-]*)[^\n]*\n(.*?)^\1\s*$", re.M | re.S)


def _blocks(language: set[str]) -> list[tuple[Path, str, set[str], str]]:
    """(page, language, classes, code) of every fenced block of those languages."""
    out = []
    for page in PAGES:
        for match in FENCE.finditer(page.read_text()):
            lang, body = match.group(3), match.group(4)
            if lang not in language:
                continue
            classes: set[str] = set()
            lines = body.splitlines()
            while lines and lines[0].startswith(":"):
                key, _, value = lines.pop(0)[1:].partition(":")
                if key.strip() == "class":
                    classes |= set(value.split())
            out.append((page, lang, classes, "\n".join(lines) + "\n"))
    return out


# --- the build --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once with warnings as errors (the notebooks from the build's cache
    when they have not changed since the last build: docs/_build/.jupyter_cache)."""
    pytest.importorskip("sphinx", reason="the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("myst_nb", reason="the docs extra: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [*SPHINX, "-d", str(out / ".doctrees"), str(DOCS), str(out / "html")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return out / "html"


def test_the_reference_has_every_key_of_the_study_file(site: Path) -> None:
    sys.path.insert(0, str(DOCS / "_ext"))
    from hpsearch_reference import study_key_sections

    page = (site / "reference" / "study-file.html").read_text()
    for path, model in study_key_sections():
        assert path.split(" ")[0] in page
        for name, field in model.model_fields.items():
            if not field.exclude:
                assert f">{field.alias or name}<" in page, f"{path}.{name}"
    assert "successive_halving" in page and "1f1b" in page, "allowed values"


def test_the_notebooks_are_rendered_with_their_outputs(site: Path) -> None:
    for name in ("01-quickstart", "02-analysis", "03-own-model"):
        page = (site / "notebooks" / f"{name}.html").read_text()
        assert "<img" in page and "image/png" not in page[:0], f"{name}: its plots show"


@pytest.fixture(scope="module")
def served(site: Path):
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _rendered(url: str, folder: Path) -> str:
    """The text of the page as headless Chromium renders it, scripts run."""
    dom = subprocess.run(
        [*CHROMIUM, "--virtual-time-budget=15000", f"--user-data-dir={folder}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))


@pytest.mark.skipif(
    shutil.which("chromium") is None,
    reason="needs Debian's chromium (apt-get install chromium; .ci/run installs it)",
)
def test_the_site_renders_and_its_search_finds_pages(served: str, tmp_path: Path) -> None:
    home = _rendered(f"{served}/index.html", tmp_path / "c1")
    assert "Getting started" in home and "How-to guides" in home and "Reference" in home
    keys = _rendered(f"{served}/reference/study-file.html", tmp_path / "c2")
    assert "reduction_factor" in keys and "max_memory_per_device" in keys
    found = _rendered(f"{served}/search.html?q=reduction_factor", tmp_path / "c3")
    assert "The study file" in found.split("Search Results", 1)[-1], found[-2000:]


# --- the examples -----------------------------------------------------------------------


#: What a part of a study file shown alone is merged into before it is validated.
BASE = {
    "name": "docs",
    "objective": {"model": "cnn"},
    "space": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
}


def _merge(base: dict, part: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in part.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def test_every_study_file_shown_validates(monkeypatch, tmp_path: Path) -> None:
    """Each YAML block, and each study file a page includes, validates; a Python block that
    opens with ``# NAME.py`` is that module, next to the studies (a study may name it)."""
    from hpsearch.spec import StudySpec

    for _, _, _, code in _blocks({"python"}):
        module = re.match(r"# (\w+\.py)\b", code)
        if module:
            (tmp_path / module.group(1)).write_text(code)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PGPASSWORD", "x")
    monkeypatch.setenv("HPS_DB_PASSWORD", "x")
    shown = 0
    for _page, _, classes, code in _blocks({"yaml"}):
        if "not-a-study" in classes:
            continue
        data = yaml.safe_load(code)
        study = data if "name" in data else _merge(BASE, data)
        if study.get("cluster", {}).get("backend") in ("slurm", "kubernetes"):
            study["cluster"].pop("address", None)
        StudySpec.from_dict(study)
        shown += 1
    included = {
        ROOT / "docs" / p.parent / m
        for p in PAGES
        for m in re.findall(r"\{literalinclude\}\s+(\S+\.yaml)", p.read_text())
    }
    for path in {p.resolve() for p in included}:
        StudySpec.from_yaml(path)
    assert shown > 10 and included


def _hpsearch_lines(code: str) -> list[str]:
    lines = []
    for raw in code.splitlines():
        line = raw.split(" #")[0].strip().removeprefix("$ ")
        for part in re.split(r"\s*&&\s*", line):
            if part.startswith("hpsearch "):
                lines.append(part)
    return lines


def test_every_shell_block_is_run_or_says_what_it_needs() -> None:
    import typer.main

    from hpsearch.cli import app
    from hpsearch.spec import StudySpec

    root = typer.main.get_command(app)
    checked = 0
    for page, _, classes, code in _blocks({"bash", "console", "shell", "sh"}):
        unknown = classes - MARKS
        assert not unknown, f"{page.name}: unknown class {unknown}"
        for line in _hpsearch_lines(code):
            words = shlex.split(line)[1:]
            command = root
            while words and hasattr(command, "commands") and words[0] in command.commands:
                command = command.commands[words.pop(0)]
            options = {o for p in command.params for o in [*p.opts, *p.secondary_opts]}
            for word in words:
                if word.startswith("--"):
                    assert word.split("=")[0] in options, f"{page.name}: {line}: {word}"
                elif re.fullmatch(r"studies/[\w.-]+\.yaml", word) and (ROOT / word).exists():
                    StudySpec.from_yaml(ROOT / word)
            checked += 1
        if classes:
            continue
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
        )
        assert done.returncode == 0, f"{page.name}:\n{code}\n{done.stdout}{done.stderr}"
    assert checked > 10


def test_every_python_snippet_runs(tmp_path: Path) -> None:
    """Each ``python`` block runs in a fresh process, in a folder where the quickstart has run
    (a small budget: 4 trials of 2 epochs), as a reader would try them one after another."""
    (tmp_path / "studies").symlink_to(ROOT / "studies")
    import hpsearch

    hpsearch.Study.from_yaml(
        ROOT / "studies" / "quickstart.yaml", n_trials=4, epochs=2, run_dir=tmp_path / "runs"
    ).run()
    snippets = _blocks({"python"})
    assert snippets
    for page, _, _, code in snippets:
        done = subprocess.run(
            [sys.executable, "-c", "import matplotlib\nmatplotlib.use('Agg')\n" + code],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"{page.name}:\n{code}\n{done.stderr[-3000:]}"


def test_the_readmes_examples_are_the_guides_tested_ones() -> None:
    """The front page's code is the guides' (whose blocks the tests above run and validate),
    word for word, so it cannot drift from what is tested."""
    readme = (ROOT / "README.md").read_text()
    pages = "\n".join(page.read_text() for page in PAGES)
    blocks = re.findall(r"^```(python|yaml)\n(.*?)^```", readme, re.M | re.S)
    assert blocks
    for lang, body in blocks:
        assert f"```{lang}\n{body}```" in pages, f"README's {lang} block is in no page:\n{body}"


# --- the reference tables and the command line ----------------------------------------


def test_every_tag_and_series_is_in_its_table() -> None:
    from hpsearch.metrics import SERIES
    from hpsearch.tracking import tag

    documented = {name for name, _, _ in tag.TAGS_TABLE}
    defined = {
        v
        for k, v in vars(tag).items()
        if k.isupper() and isinstance(v, str) and v.startswith("hpsearch.") and "{" not in v
    }
    assert defined <= documented, defined - documented
    served = set()
    for source in ("metrics/_study.py", "coordinator/_figures.py"):
        served |= set(re.findall(r'"(hpsearch_[a-z_]+)"', (ROOT / "hpsearch" / source).read_text()))
    assert served == {name for name, *_ in SERIES}


def test_every_command_points_to_its_page() -> None:
    import typer.main

    from hpsearch.cli import app

    def walk(command, path):
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, f"{path} {name}")

    for path, command in walk(typer.main.get_command(app), "hpsearch"):
        assert command.epilog and command.epilog.startswith("Docs: docs/"), path
        page = command.epilog.removeprefix("Docs: ")
        assert (ROOT / page).exists(), f"{path}: {page}"


def test_the_run_closing_lines_keep_the_command_whole() -> None:
    """In an 80-column terminal the MLflow UI command is one line, to be copied whole."""
    from types import SimpleNamespace

    from rich.console import Console

    from hpsearch.cli import _summary

    uri = "sqlite:////home/someone/projects/a-long-folder-name/runs/mlflow.db"
    progress = SimpleNamespace(ended=1, complete=0, pruned=0, failed=1, front=None)
    result = SimpleNamespace(
        progress=progress,
        notes=[],
        front=None,
        best=None,
        simulation=None,
        storage_url="journal:///x",
        mlflow_uri=uri,
    )
    console = Console(width=80, record=True, color_system=None)
    _summary(console, result)
    assert f"mlflow ui --backend-store-uri {uri}" in console.export_text().splitlines()

"""``import hpsearch`` and ``hpsearch --help`` stay cheap (no torch, distributed or mlflow),
and the package keeps its layers: import-linter's contracts hold, and the documentation
describes the same rooms as the contract."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

HEAVY = ("torch", "distributed", "mlflow")


def _modules_after(code: str) -> set[str]:
    out = (
        subprocess.run(
            [sys.executable, "-c", f"import sys\n{code}\nprint(','.join(sys.modules))"],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    return set(out.split(","))


def test_import_hpsearch_is_light():
    loaded = _modules_after("import hpsearch")
    assert not [m for m in HEAVY if m in loaded]


def test_cli_help_is_light():
    loaded = _modules_after(
        "import sys\nfrom hpsearch.cli import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass"
    )
    assert not [m for m in HEAVY if m in loaded]


# --- The layers ----------------------------------------------------------------------------
#
# import-linter (``lint-imports``, run by CI) checks the contracts of ``pyproject.toml``: rooms
# import only rooms below them, no room imports another's private module, no import cycle
# between the modules of a room; type-only and in-function imports count.

ROOT = Path(__file__).resolve().parents[1]


def test_the_layer_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def _contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [" | ".join(part.strip() for part in row.split("|")) for row in layers["layers"]]


def _documented_rooms() -> list[str]:
    """The rooms the documentation describes (docs/_ext: the layers page, "How it works", is
    generated from the contract with what each room owns)."""
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        from hpsearch_reference import LAYERS_OWN
    finally:
        sys.path.pop(0)
    return list(LAYERS_OWN)


def test_the_docs_describe_the_rooms_of_the_contract():
    assert _documented_rooms() == [room for row in _contract_layers() for room in row.split(" | ")]


def test_every_room_is_in_a_layer():
    listed = {name for row in _contract_layers() for name in row.split(" | ")}
    rooms = {
        p.stem if p.is_file() else p.name
        for p in (ROOT / "hpsearch").iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()
    }
    assert rooms == listed
    flat = [p.name for p in (ROOT / "hpsearch").glob("*.py")]
    assert len(flat) <= 6, flat

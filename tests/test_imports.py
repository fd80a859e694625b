"""``import hpsearch`` and ``hpsearch --help`` stay cheap: no torch, distributed or mlflow."""

from __future__ import annotations

import subprocess
import sys

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

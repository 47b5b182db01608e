"""The README's set-up is what CI runs: the same script, the same test command."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _blocks(section: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", body, re.S)


def _commands(block: str) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def test_ci_runs_the_readmes_set_up_and_test_commands():
    blocks = _blocks("Set up")
    setup = next(b for b in blocks if _commands(b)[0].startswith("git clone "))
    run = next(b for b in blocks if "python -m pytest -q" in _commands(b))
    clone, install = _commands(setup)
    assert clone.startswith("git clone ") and install == "./setup.sh && source .venv/bin/activate"
    assert _commands(run) == ["grade exercise 01", "python -m pytest -q"]
    ci = _commands((ROOT / ".ci" / "run").read_text())
    assert ci[-3:] == ["./setup.sh", "source .venv/bin/activate", "python -m pytest -q"]


def test_the_setup_script_is_valid_bash_and_executable():
    script = ROOT / "setup.sh"
    assert script.stat().st_mode & 0o111
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in text   # PyTorch's CPU wheels
    assert '".[$extras]"' in text

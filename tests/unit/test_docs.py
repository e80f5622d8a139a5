"""The README stays true: its settings table is generated from Settings."""

from pathlib import Path

from conduit.runtime.settings import settings_table

ROOT = Path(__file__).resolve().parents[2]


def test_readme_settings_table_is_current():
    assert settings_table() in (ROOT / "README.md").read_text(encoding="utf-8"), (
        "README settings table is stale: regenerate it with "
        "`.venv/bin/python -m conduit.runtime.settings` and paste it into README.md"
    )


def test_readme_shows_the_two_commands_and_ci_calls_the_test_one():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "python3 bootstrap.py demo" in readme and "python3 bootstrap.py test" in readme
    assert "bootstrap.py test" in (ROOT / ".ci" / "run").read_text()

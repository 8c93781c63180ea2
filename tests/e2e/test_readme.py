"""README.md stays true: its config table is generated from ``broker.config.CONFIG_KEYS``.

Regenerate the table after changing the config keys with::

    python3 tests/e2e/test_readme.py
"""

from __future__ import annotations

import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
BEGIN = "<!-- config-table:begin (generated from broker/config.py by tests/e2e/test_readme.py) -->"
END = "<!-- config-table:end -->"


def render_config_table() -> str:
    from broker.config import config_table

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| Key | Type | Default | Meaning |", "|---|---|---|---|"]
    for row in config_table():
        default = f"`{row['default']}`" if row["default"] != "" else "(unset)"
        lines.append(f"| `{row['name']}` | {row['type']} | {cell(default)} | {cell(row['description'])} |")
    return "\n".join(lines)


def readme_table(text: str) -> str:
    start = text.index(BEGIN) + len(BEGIN)
    return text[start:text.index(END, start)].strip()


def test_readme_config_table_matches_broker_config():
    assert readme_table(README.read_text()) == render_config_table(), (
        "README.md's config table is stale: run python3 tests/e2e/test_readme.py")


def test_readme_gives_the_run_and_test_commands():
    text = README.read_text()
    assert "pip install . && minikafka serve" in text
    assert "bash tests/run.sh" in text


if __name__ == "__main__":
    sys.path.insert(0, str(README.parent))
    text = README.read_text()
    start = text.index(BEGIN) + len(BEGIN)
    end = text.index(END, start)
    README.write_text(text[:start] + "\n" + render_config_table() + "\n" + text[end:])
    print(f"updated {README}")

"""README's "Your own model" example runs as written (it trains here and on an ec cluster with a server killed,
and asserts that both end at the same model)."""

from __future__ import annotations

import re

from support.paths import REPO_ROOT


def test_the_your_own_model_example_runs_as_written() -> None:
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("## Your own model", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, re.S)
    exec(compile(code, "README.md (Your own model)", "exec"), {"__name__": "readme_example"})

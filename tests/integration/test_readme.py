"""README's examples run as written. "Your own model": every ```python block of it, in order, in ONE shared namespace
(as a reader pastes them one after the other into one session: a later block may use what an earlier one defined).
Each block runs with the README's own line numbers, so a failure points at the README line.

The first block trains here and on an ec cluster with a server killed and asserts that both end at the same model;
its hold-out AUC must show that the planted signal was learned, and the output the README shows under it must be
what it prints. "Train": its table example runs too. docs/models.md continues "Your own model" (several heads, a
behaviour sequence, a side input): its blocks run after the README's, in the same namespace."""

from __future__ import annotations

import ast
import re
from typing import Any, Dict, List, Tuple

import pytest

from support.paths import REPO_ROOT

SECTION = "## Your own model"
MODELS_PAGE = "docs/models.md"


def section_blocks(title: str, page: str = "README.md") -> Tuple[List[Tuple[int, str]], List[str]]:
    """The ```python blocks of ``page``'s section ``title`` (the whole page for ``""``) as (first code line's number
    in the page, code), and its ```text blocks."""
    text = (REPO_ROOT / page).read_text()
    start = text.index(f"\n{title}\n") + 1 if title else 0
    end = text.find("\n## ", start + len(title)) if title else -1
    section = text[start : end if end != -1 else len(text)]
    offset = text.count("\n", 0, start)
    python = [
        (offset + section.count("\n", 0, m.start(1)) + 1, m.group(1))
        for m in re.finditer(r"^```python\n(.*?)^```", section, re.S | re.M)
    ]
    shown = [m.group(1) for m in re.finditer(r"^```text\n(.*?)^```", section, re.S | re.M)]
    return python, shown


def test_every_python_block_of_your_own_model_runs_in_order_in_one_namespace(capsys: pytest.CaptureFixture) -> None:
    blocks, shown = section_blocks(SECTION)
    assert blocks, f"README.md: no ```python block under {SECTION!r}"
    namespace: Dict[str, Any] = {"__name__": "readme_example"}
    for number, (line, code) in enumerate(blocks, 1):
        run_block(line, code, namespace)
        if number == 1:
            first_block_learned_and_printed_what_the_readme_shows(namespace, capsys.readouterr().out, shown)
    # docs/models.md continues the example (several heads, a sequence, a side input) in the same session
    continued, _ = section_blocks("", page=MODELS_PAGE)
    assert continued, f"{MODELS_PAGE}: no ```python block"
    for line, code in continued:
        run_block(line, code, namespace, page=MODELS_PAGE)
    assert {"heads", "din"} <= namespace.keys(), f"{MODELS_PAGE} no longer trains the two-head and the DIN job"


def test_the_train_sections_table_example_runs() -> None:
    blocks, _ = section_blocks("## Train")
    assert blocks, "README.md: no ```python block under '## Train'"
    namespace: Dict[str, Any] = {"__name__": "readme_example"}
    for line, code in blocks:
        run_block(line, code, namespace)
    assert namespace["rows"].shape == (4, 16) and set(namespace["state"]["keys"].tolist()) == {42, 7, -3}


def run_block(line: int, code: str, namespace: Dict[str, Any], page: str = "README.md") -> None:
    # padding with blank lines: the compiled block's line numbers are the page's
    exec(compile("\n" * (line - 1) + code, page, "exec"), namespace)


def first_block_learned_and_printed_what_the_readme_shows(
    namespace: Dict[str, Any], printed: str, shown: List[str]
) -> None:
    report, on_servers, holdout = namespace["report"], namespace["on_servers"], namespace["holdout"]
    # the cluster run lost a server and rebuilt it, ending at the one-process run's model (the block asserts the
    # digests too; this keeps the kill from silently disappearing from the example)
    assert on_servers["model_digest"] == report["model_digest"]
    assert [(lost["role"], lost["index"], lost["step"]) for lost in on_servers["failures"]] == [("server", 1, 20)]
    assert holdout["auc"] > 0.7, f"the example's model did not learn its planted signal: {holdout}"
    assert shown, "README.md: the example's output (a ```text block) is missing"
    readme = ast.literal_eval(shown[0].strip())
    real = ast.literal_eval(printed.strip().splitlines()[-1])
    assert sorted(readme) == sorted(real) and readme["eval_samples"] == real["eval_samples"]
    for metric in ("auc", "logloss"):  # the README shows what it prints (rounding aside)
        assert abs(readme[metric] - real[metric]) < 0.005, f"README shows {readme}, the example printed {real}"


def test_every_results_file_is_listed_in_the_results_index() -> None:
    results = REPO_ROOT / "docs" / "results"
    index = (results / "README.md").read_text()
    unlisted = [p.name for p in sorted(results.iterdir()) if p.name != "README.md" and f"]({p.name})" not in index]
    assert not unlisted, f"docs/results/README.md: add a line for each of {unlisted}"


def test_every_link_of_the_readme_to_the_repository_resolves() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    links = re.findall(r"\]\(((?:docs|examples|bench|scripts|tests|cpp|python|xdl_ec)/[^)#\s]+)\)", readme)
    assert links, "README.md: no link into the repository found (the pattern above no longer matches its links?)"
    missing = [link for link in links if not (REPO_ROOT / link).exists()]
    assert missing == [], f"README.md links to files that do not exist: {missing}"

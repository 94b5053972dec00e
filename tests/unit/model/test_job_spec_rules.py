"""JobSpec.with_default_rules: the command line's table flags as the rules of a script's tables that declare none
(`xdl-ec train --script FILE.py --max-rows N ...`); a table's own rules stay, features follow their table."""

from __future__ import annotations

import pytest

import xdl_ec
from xdl_ec.model.job_spec import JobSpec


def spec(own: xdl_ec.Evict) -> JobSpec:
    users = xdl_ec.Table("users", dim=4)
    items = xdl_ec.Table("items", dim=4, evict=own)
    return xdl_ec.Job(
        tables=[users, items],
        features=[xdl_ec.Feature("user", users), xdl_ec.Feature("item", items), xdl_ec.Feature("seen", items)],
        model_fn=lambda: None,
        input_fn=lambda worker, workers: iter(()),
    ).spec


def test_tables_without_rules_take_the_defaults_and_declared_rules_stay() -> None:
    own = xdl_ec.Evict(ttl_steps=50)
    admit, evict = xdl_ec.Admit(min_count=3), xdl_ec.Evict(max_rows=1 << 16)
    bounded = spec(own).with_default_rules(admit, evict)
    tables = {t.name: t for t in bounded.tables}
    assert tables["users"].admit == admit and tables["users"].evict == evict
    assert tables["items"].admit is None and tables["items"].evict == own  # declared: kept whole
    assert all(f.table is tables[f.table.name] for f in bounded.features)
    assert [t.name for t in bounded.tables] == ["users", "items"]  # the digest's order


def test_no_rules_is_the_same_job_and_a_bad_default_changes_nothing() -> None:
    plain = spec(xdl_ec.Evict(ttl_steps=50))
    assert plain.with_default_rules(None, None) is plain
    with pytest.raises(ValueError, match="below one block"):
        plain.with_default_rules(None, xdl_ec.Evict(max_rows=10))
    assert plain.tables[0].evict is None

"""The train command's flags made from its configs' fields: every field with a flag is on the parser, the parsed
flags come back as the config's keywords, and a config's errors are written with the flags' names."""

from __future__ import annotations

import argparse
import dataclasses

from xdl_ec.builtin.criteo_job import TrainConfig
from xdl_ec.cli import build_parser
from xdl_ec.cli.config_flags import flag_names
from xdl_ec.cli.train_request import CLUSTER_FLAGS, train_request
from xdl_ec.job.cluster import Cluster
from xdl_ec.settings.flag import field_flags
from xdl_ec.sparse.cache_config import Cache


def test_every_flag_of_the_configs_is_a_train_flag() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    train = commands.choices["train"]
    on_parser = {name for action in train._actions for name in action.option_strings}
    declared = {f.flag.name for config in (TrainConfig, Cluster) for f in field_flags(config)}
    assert declared <= on_parser
    unflagged = {f.name for f in dataclasses.fields(Cluster)} - {f.field for f in field_flags(Cluster)}
    assert unflagged == {"cache", "rebuild", "call_timeout"}  # the cache through Cache's own flags


def test_the_parsed_flags_are_the_clusters_keywords() -> None:
    args = build_parser().parse_args(
        ["train", "--synthetic", "--servers", "4", "--ft", "ec", "--code", "2,1", "--resize-share", "0.3"]
        + ["--cache-rows", "10%", "--staleness", "2", "--fail-at", "5:1", "--fail-at", "9", "--steps", "20"]
    )
    request = train_request(args)
    assert request.cluster == Cluster(
        servers=4,
        ft="ec",
        code=(2, 1),
        resize_share=0.3,
        cache=Cache(rows="10%", staleness=2),
        fail_at=("5:1", "9"),
    )
    assert (request.steps, request.seed, request.deterministic) == (20, 0, False)


def test_a_configs_error_names_the_flag_and_the_longest_name_wins() -> None:
    assert flag_names("cpr mode: must be one of ('mfu', 'ssu')", CLUSTER_FLAGS).startswith("--cpr-mode: ")
    assert flag_names("mode: must be 'sync' or 'async'", CLUSTER_FLAGS).startswith("--mode: ")
    assert flag_names("cache rows: 'x' is neither", CLUSTER_FLAGS) == "--cache-rows: 'x' is neither"
    assert flag_names("rows: 3 (ft='ec')", CLUSTER_FLAGS) == "rows: 3 (--ft ec)"  # a Cache field's bare name is not

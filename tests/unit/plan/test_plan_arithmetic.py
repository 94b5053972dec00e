"""The planner's arithmetic: units, the memory breakdown and its rounding, the code and server choice, the overhead
lines, and refusals (bad values and impossible fits), against constants written here so every figure can be worked
out by hand."""

from __future__ import annotations

import math

import pytest

from xdl_ec.plan.job_plan import K_MAX, JobPlan, PlanRequest, code_for
from xdl_ec.plan.measured_constants import MeasuredConstants, RowMemory
from xdl_ec.plan.memory_model import fits, in_memory, rows_per_server, with_disk_tier
from xdl_ec.plan.overhead_model import StrategyCost
from xdl_ec.plan.row_layout import RowLayout
from xdl_ec.plan.units import duration_seconds, size_bytes

GIB = 1 << 30
ROW = RowMemory(index_rows_per_byte=0.75 / 8, rss_per_held_byte=1.0, tier_slot_bytes=12)  # 8 B buckets, 3/4 full


def constants(**costs: StrategyCost) -> MeasuredConstants:
    base = {
        "ec": StrategyCost(0.05, 2.0),
        "ckpt": StrategyCost(0.02, 60.0),
        "cpr": StrategyCost(0.01, 1.0),
    }
    base.update(costs)
    return MeasuredConstants(
        costs=base,
        labels={"ec": "ec-2+1", "ckpt": "ckpt", "cpr": "cpr-mfu"},
        samples_per_sec=10_000.0,
        bytes_per_server=1e6,
        rebuild_seconds=0.05,
        row_memory=ROW,
        provenance={"command": "xdl-ec bench --sweep-mtbf 1 (test)"},
    )


def test_units() -> None:
    assert size_bytes("--m", "64G") == 64 * GIB and size_bytes("--m", "1.5GiB") == int(1.5 * GIB)
    assert size_bytes("--m", "1000") == 1000
    assert duration_seconds("--mtbf", "14h") == 14 * 3600 and duration_seconds("--mtbf", "30m") == 1800
    assert duration_seconds("--mtbf", "2d") == 2 * 86400 and duration_seconds("--mtbf", "90") == 90
    for bad, said in (("-1G", "cannot be negative"), ("0", "positive"), ("12 parsecs", "like 64G")):
        with pytest.raises(ValueError, match=said):
            size_bytes("--memory-per-server", bad)
    for bad, said in (("-3h", "cannot be negative"), ("0h", "positive"), ("soon", "like 14h")):
        with pytest.raises(ValueError, match=f"--mtbf: .*{said}"):
            duration_seconds("--mtbf", bad)


def test_row_layout_is_the_cores() -> None:
    adagrad = RowLayout.of(16, "adagrad")
    assert (adagrad.header_bytes, adagrad.value_bytes, adagrad.state_bytes) == (12, 64, 64)
    assert RowLayout.of(16, "sgd").state_bytes == 0 and RowLayout.of(8, "adam").state_bytes == 64


def test_memory_breakdown_rounds_rows_up() -> None:
    layout = {"t": RowLayout.of(16, "adagrad")}  # 76 B of key, words and values; 64 B of state
    rows = rows_per_server({"t": 10}, 3)
    assert rows == {"t": 4}  # ceil(10 / 3): the fullest server
    m = in_memory(rows, layout, ROW, parity_share=0.5)
    assert (m.rows, m.optimizer_state, m.key_index, m.slack) == (4 * 76, 4 * 64, 64, 0)
    assert m.parity == math.ceil(0.5 * 4 * 140) and m.total == 304 + 256 + 64 + 280
    slack = in_memory(rows, layout, RowMemory(0.75 / 8, 1.25, 12), 0.0)
    assert slack.slack == math.ceil((304 + 256 + 64) * 0.25)


def test_index_doubles_when_full() -> None:
    assert ROW.index_bytes(0) == 0 and ROW.index_bytes(1) == 16  # 1 / (3/32) = 10.7 -> 16 B
    assert ROW.index_bytes(49_152) == 524_288 and ROW.index_bytes(49_153) == 1_048_576  # 3/4 of 65,536 buckets


def test_disk_tier_keeps_index_and_slot_words_in_ram() -> None:
    layout = {"t": RowLayout.of(16, "adagrad")}
    # the index of 1,000 rows, 12 B per slot, the mapping's eighth of the budget, a tenth of the records
    ram = 48_440
    m = with_disk_tier({"t": 1000}, layout, ROW, 0.0, memory_bytes=ram)
    assert m is not None and m.tiered
    assert (m.key_index, m.disk_tier, m.disk_bytes) == (16_384, 12_000 + ram // 8, 140_000)
    assert m.rows + m.optimizer_state <= 14_001 and m.total <= ram  # frames fill the rest
    assert with_disk_tier({"t": 1000}, layout, ROW, 0.0, memory_bytes=32_437) is None  # fixed part alone too big
    assert with_disk_tier({"t": 1000}, layout, ROW, 0.0, memory_bytes=32_438) is not None
    assert fits(m, ram, 140_000)[0] and not fits(m, ram, 139_999)[0] and not fits(m, ram, None)[0]


def test_code_choice() -> None:
    assert code_for(1, 3600.0, 1.0) is None
    assert code_for(2, 3600.0, 1.0) == (1, 1)
    assert code_for(5, 50_400.0, 1.0) == (4, 1)  # 4 * 1 / 50400 below the risk bound
    assert code_for(100, 50_400.0, 1.0) == (K_MAX, 2)  # 99 / 50400 above it: a second loss is likely
    assert code_for(20, 50_400.0, 0.0) == (K_MAX, 1)


def test_strategy_cost_fit_and_scaling() -> None:
    cost = StrategyCost.fit([(0.0, 0.1), (0.01, 0.2), (0.02, 0.3)])
    assert cost.steady == pytest.approx(0.1) and cost.seconds_per_failure == pytest.approx(10.0)
    assert cost.overhead(36.0) == pytest.approx(0.1 + 10.0 * 36 / 3600)
    assert StrategyCost.fit([(0.01, 0.2), (0.01, 0.4)]).seconds_per_failure == 0.0  # one rate: flat
    assert StrategyCost.fit([(0.0, 0.3), (0.01, 0.1)]).seconds_per_failure == 0.0  # noise: no negative cost
    through_origin = StrategyCost.fit([(0.01, -0.1), (0.02, 0.1)])  # the line crosses below 0 at no failures
    assert through_origin.steady == 0.0
    assert through_origin.seconds_per_failure == pytest.approx((0.01 * -0.1 + 0.02 * 0.1) / (0.01**2 + 0.02**2))
    assert cost.scaled(2.0, 3.0).overhead(36.0) == pytest.approx(0.2 + 30.0 * 36 / 3600)
    with pytest.raises(ValueError, match="no measured points"):
        StrategyCost.fit([])


def test_young_term_of_a_checkpointing_strategy() -> None:
    young = StrategyCost(0.0, 0.0, save_seconds=2.0)
    assert young.overhead(3600.0) == pytest.approx(2.0)  # sqrt(2 * 2 s * 1 failure/s)
    assert young.overhead(36.0) == pytest.approx(0.2)  # a hundredth of the rate: a tenth of the overhead
    points = [(x, 0.01 + math.sqrt(2 * 0.5 * x) + 3.0 * x) for x in (0.001, 0.01, 0.05)]
    fitted = StrategyCost.fit(points, save_seconds=0.5)
    assert (fitted.steady, fitted.seconds_per_failure) == (pytest.approx(0.01), pytest.approx(3.0))
    assert fitted.scaled(1.0, 4.0).save_seconds == 2.0


def test_plan_servers_memory_and_overhead() -> None:
    layout = {"t": RowLayout.of(16, "adagrad")}
    rows = 1_000_000  # 140 B records; the index of 250,000 rows is 4 MiB
    request = PlanRequest({"t": rows}, layout, memory_per_server=50_000_000, mtbf_s=36_000.0)
    plan = JobPlan(request, constants())
    ckpt, ec = plan.plans["ckpt"], plan.plans["ec"]
    assert ckpt.servers == 4  # 35 MB + 4 MiB fits, 3 servers: 46.7 MB + 4 MiB does not
    assert ckpt.memory.parity == 0 and ckpt.memory.total <= 50_000_000
    # ec: parity r / k of the records; 4 servers -> k=3, r=1: 39.2 MB + 11.7 MB > 50 MB; 5 -> k=4: 32.2 + 7 MB
    assert (ec.servers, ec.code) == (5, (4, 1))
    assert ec.memory.parity == math.ceil(0.25 * 200_000 * 140)
    # overhead: steady + seconds per failure * servers / MTBF
    records = 200_000 * 140
    assert ec.failures_per_hour == pytest.approx(5 * 3600 / 36_000)
    # ec: only the rebuild's part of a failure (0.05 s of the 2.0) scales with the bytes
    assert ec.overhead == pytest.approx(0.05 + (1.95 + 0.05 * records / 1e6) * 0.5 / 3600)
    assert plan.recommended == "ec"  # ckpt: 60 s per failure at 28x the bytes
    out = plan.to_json()
    assert out["servers"] == 5 and out["code"] == {"k": 4, "r": 1}
    assert out["memory_per_server_bytes"]["total"] == ec.memory.total
    assert set(out["overhead"]) == {"ec", "ckpt", "cpr"}


def test_samples_per_sec_scales_the_steady_cost() -> None:
    layout = {"t": RowLayout.of(16, "adagrad")}
    base = PlanRequest({"t": 1000}, layout, memory_per_server=GIB, mtbf_s=1e12)
    fast = PlanRequest({"t": 1000}, layout, memory_per_server=GIB, mtbf_s=1e12, samples_per_sec=20_000.0)
    c = constants()
    assert JobPlan(fast, c).plans["ec"].overhead == pytest.approx(2 * JobPlan(base, c).plans["ec"].overhead, rel=1e-6)


def test_disk_tier_only_when_ram_cannot_fit() -> None:
    layout = {"t": RowLayout.of(16, "adagrad")}
    request = PlanRequest(
        {"t": 1_000_000}, layout, memory_per_server=10_000_000, mtbf_s=1e6, max_servers=10, disk_per_server=GIB
    )
    ckpt = JobPlan(request, constants()).plans["ckpt"]
    assert ckpt.memory.tiered and ckpt.servers == 3  # 333,334 rows: 4 MiB of index + 4 MB of slot words
    assert ckpt.memory.disk_bytes == 333_334 * 140
    roomy = PlanRequest({"t": 1_000}, layout, memory_per_server=GIB, mtbf_s=1e6, disk_per_server=GIB)
    assert not JobPlan(roomy, constants()).plans["ckpt"].memory.tiered


def test_refusals_say_what_to_change() -> None:
    layout = {"t": RowLayout.of(16, "adagrad")}
    with pytest.raises(ValueError, match="raise --memory-per-server, give --disk-per-server"):
        JobPlan(
            PlanRequest({"t": 10**9}, layout, memory_per_server=1 << 20, mtbf_s=3600.0, max_servers=50), constants()
        )
    with pytest.raises(ValueError, match="positive whole number of rows"):
        PlanRequest({"t": 0}, layout, memory_per_server=GIB, mtbf_s=3600.0)
    with pytest.raises(ValueError, match="no table named 'u'"):
        PlanRequest({"u": 5}, layout, memory_per_server=GIB, mtbf_s=3600.0)
    with pytest.raises(ValueError, match="mtbf: must be a positive"):
        PlanRequest({"t": 5}, layout, memory_per_server=GIB, mtbf_s=-1.0)
    with pytest.raises(ValueError, match="samples per sec"):
        PlanRequest({"t": 5}, layout, memory_per_server=GIB, mtbf_s=1.0, samples_per_sec=0.0)

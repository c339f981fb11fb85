"""benchmarks/scale_model.py without a testbed: the model's arithmetic, the fit on
synthetic measurements it must recover, and the extrapolation's bookkeeping."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from benchmarks.scale_model import (
    RESNET50_BYTES,
    Assumptions,
    Layout,
    Model,
    Point,
    allreduce_seconds,
    fit,
    is_fit_point,
    latency_for_target,
    main,
    predict,
    resnet50_sizes,
    scaled_model,
    step,
    step_overheads,
)

MODEL = Model(call_overhead=100e-6, shm_latency=20e-6, shm_bandwidth=4e9, net_latency=50e-6,
              net_bandwidth=0.22e9, reduce_bandwidth=10e9, oversubscribed_latency=1e-3,
              cores=2)
MIB = 1 << 20


def test_resnet50_has_161_gradients_of_its_known_total():
    sizes = resnet50_sizes()
    assert len(sizes) == 161 and sum(sizes) == RESNET50_BYTES


def test_a_ring_of_two_hosts_moves_the_buffer_once_each_way():
    """2 ranks, 2 hosts, 64 MiB: 16 chunk messages and a gather message, 64 MiB each
    way at the network's bandwidth, one call; the 32 MiB reduced stream under the
    transfer (the link is the slower)."""
    got = allreduce_seconds(MODEL, 64 * MIB, Layout(2, 1))
    want = 100e-6 + 17 * 50e-6 + 64 * MIB / 0.22e9
    assert got == pytest.approx(want)


def test_a_streamed_hop_costs_the_slower_of_link_and_reduction():
    """Where the reduction is slower than the link, it sets the reduce-scatter's pace;
    inside a host the two still add up."""
    slow_reduce = replace(MODEL, reduce_bandwidth=0.1e9)
    got = allreduce_seconds(slow_reduce, 64 * MIB, Layout(2, 1))
    want = 100e-6 + 17 * 50e-6 + 32 * MIB / 0.1e9 + 32 * MIB / 0.22e9
    assert got == pytest.approx(want)
    one_host = allreduce_seconds(MODEL, 64 * MIB, Layout(1, 2), single_tensor=False)
    assert one_host == pytest.approx(
        100e-6 + 17 * 20e-6 + 64 * MIB / 4e9 + 32 * MIB / 10e9)


def test_a_training_step_is_its_floor_and_one_fused_allreduce():
    point = Point(Layout(2, 2), "train-mlp", 37_700_000, 0.5, 0.5, 0.5, 1, floor=0.2)
    assert point.two_levels
    assert predict(MODEL, point) == pytest.approx(
        0.2 + allreduce_seconds(MODEL, 37_700_000, Layout(2, 2), two_levels=True,
                                single_tensor=False))
    assert not is_fit_point(point)


def test_two_levels_carry_less_over_the_network_than_the_flat_ring():
    flat = allreduce_seconds(MODEL, 64 * MIB, Layout(2, 2))
    two = allreduce_seconds(MODEL, 64 * MIB, Layout(2, 2), two_levels=True)
    assert 1.3 < flat / two < 1.5          # 1.5 x S over the link against S, plus shm


def test_small_single_tensors_are_gathered():
    layout = Layout(2, 1)
    assert allreduce_seconds(MODEL, 4096, layout) == pytest.approx(
        100e-6 + 50e-6 + 4096 / 0.22e9 + 4096 / 10e9)


def test_the_fit_recovers_the_parameters_of_its_own_predictions():
    layouts = [Layout(1, 2), Layout(2, 1), Layout(4, 1)]
    sizes = [4096 << i for i in range(15)]
    points = [Point(layout, "gcurun-tcp", n, s, s, s, 1) for layout in layouts
              for n in sizes for s in [allreduce_seconds(MODEL, n, layout)]]
    assert all(is_fit_point(p) for p in points)
    fitted = fit(points, MODEL.reduce_bandwidth, MODEL.cores)
    for name in ("call_overhead", "shm_latency", "shm_bandwidth", "net_latency",
                 "net_bandwidth", "oversubscribed_latency"):
        assert getattr(fitted, name) == pytest.approx(getattr(MODEL, name), rel=1e-6), name


def test_the_extrapolation_scales_the_link_and_keeps_the_testbeds_efficiency():
    scaled = scaled_model(MODEL, 100.0, 2_000_000_000, Assumptions())
    assert scaled.net_bandwidth == pytest.approx(0.22e9 / 0.25e9 * 12.5e9)
    assert scaled.cores > 1024          # real hosts: no oversubscription
    seconds, efficiency = step(scaled, 8, False, Assumptions(compute_ms=100.0))
    assert efficiency == pytest.approx(0.1 / seconds)


def test_the_latency_bound_is_where_efficiency_crosses_the_target():
    assume = Assumptions(compute_ms=100.0, overlap=2 / 3, shm_gbytes=100.0)
    bound = latency_for_target(MODEL, 1024, True, assume, 200.0, 2_000_000_000)
    assert bound is not None and bound > 0
    at = Assumptions(compute_ms=100.0, overlap=2 / 3, net_latency_us=bound * 1e6 * 0.99,
                     shm_gbytes=100.0)
    past = Assumptions(compute_ms=100.0, overlap=2 / 3, net_latency_us=bound * 1e6 * 1.01,
                       shm_gbytes=100.0)
    efficiency = [step(scaled_model(MODEL, 200.0, 2_000_000_000, a), 1024, True, a)[1]
                  for a in (at, past)]
    assert efficiency[0] >= 0.9 > efficiency[1]


def test_the_command_fits_checks_and_extrapolates(tmp_path, capsys):
    rows = {}
    for layout in (Layout(1, 2), Layout(2, 1), Layout(4, 1), Layout(2, 2)):
        variants = ["gcurun-tcp-flat", "gcurun-tcp-2level"] if layout.per_host > 1 and \
            layout.hosts > 1 else ["gcurun-tcp"]
        rows[layout] = [{"nbytes": n, "variant": v, "calls": 1, "checked_turns": 1,
                         "seconds": [allreduce_seconds(MODEL, n, layout,
                                                       v.endswith("2level"))] * 3}
                        for n in (64 << 10, 256 << 10, 1 * MIB, 16 * MIB) for v in variants]
    data = {"reduce_bandwidth": MODEL.reduce_bandwidth, "layouts": [
        {"hosts": lay.hosts, "ranks_per_host": lay.per_host, "cores": 2,
         "link_rate_bits": 2_000_000_000, "rows": r} for lay, r in rows.items()]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    assert main(["--fit", str(path), "--json", str(tmp_path / "model.json")]) == 0
    out = capsys.readouterr().out
    assert "| 2x2 | gcurun-tcp-2level | 16 MiB |" in out
    assert "Predictions within 15% from 1 MiB up: 2 of 2 (errors" in out
    assert "Predictions within 15% below 1 MiB: 2 of 2 (errors" in out
    assert "| 1024 (128 x 8) | 200 Gbit/s |" in out
    saved = json.loads((tmp_path / "model.json").read_text())
    assert math.isclose(saved["model"]["net_bandwidth"], MODEL.net_bandwidth, rel_tol=1e-6)


def test_the_command_predicts_the_training_steps_it_is_given(tmp_path, capsys):
    rows = [{"nbytes": n, "variant": "gcurun-tcp", "calls": 1, "checked_turns": 1,
             "seconds": [allreduce_seconds(MODEL, n, Layout(2, 1))] * 3}
            for n in (64 << 10, 256 << 10, 1 * MIB, 16 * MIB)]
    fit_file = tmp_path / "calib.json"
    fit_file.write_text(json.dumps({"reduce_bandwidth": MODEL.reduce_bandwidth, "layouts": [
        {"hosts": 2, "ranks_per_host": 1, "cores": 2, "link_rate_bits": 2_000_000_000,
         "rows": rows}]}))
    step_seconds = 0.1 + allreduce_seconds(MODEL, 4_000_000, Layout(2, 1), single_tensor=False)
    training = tmp_path / "training.json"
    training.write_text(json.dumps({"one_rank_seconds": {"mlp": 0.09}, "layouts": [
        {"hosts": 2, "ranks_per_host": 1, "cores": 2, "link_rate_bits": 2_000_000_000,
         "models": {"mlp": {"params": 1_000_000, "batch": 64, "times": {
             "gcurun-tcp": [step_seconds] * 3, "ddp": [0.3] * 3, "floor": [0.1] * 3}}}}]}))
    assert main(["--fit", str(fit_file), "--training", str(training)]) == 0
    out = capsys.readouterr().out
    assert "## Training steps across hosts" in out
    assert f"| 2x1 | mlp | 4.0 MB | 100.0 | {step_seconds * 1e3:.1f} (" in out
    assert "Training steps within 15%: 1 of 1 (errors +0% to +0%)." in out


def _training_file(path, layout, step_seconds, floor=0.1, nbytes=4_000_000):
    """A cluster_training.py JSON of one layout and the MLP alone."""
    path.write_text(json.dumps({"one_rank_seconds": {"mlp": 0.09}, "layouts": [
        {"hosts": layout.hosts, "ranks_per_host": layout.per_host, "cores": 2,
         "link_rate_bits": 2_000_000_000,
         "models": {"mlp": {"params": nbytes // 4, "batch": 64, "times": {
             "gcurun-tcp": [step_seconds] * 3, "ddp": [0.3] * 3, "floor": [floor] * 3}}}}]}))
    return path


def test_the_overhead_is_what_one_host_takes_beyond_floor_and_allreduce(tmp_path):
    """Three one-host runs whose steps exceed floor + allreduce by 10, 20 and 40 ms: the
    overhead is the median run's, and a cross-host step's prediction adds it."""
    shm = allreduce_seconds(MODEL, 4_000_000, Layout(1, 2), single_tensor=False)
    files = [_training_file(tmp_path / f"one-{ms}.json", Layout(1, 2), 0.1 + ms / 1e3 + shm)
             for ms in (40, 10, 20)]
    (overhead,) = step_overheads(MODEL, files)
    assert overhead.variant == "train-mlp" and overhead.layout == Layout(1, 2)
    assert sorted(overhead.per_run) == pytest.approx([0.01, 0.02, 0.04])
    assert overhead.overhead == pytest.approx(0.02)
    assert overhead.seconds == pytest.approx(0.12 + shm)
    assert overhead.allreduce == pytest.approx(shm)
    across = Point(Layout(2, 1), "train-mlp", 4_000_000, 0.5, 0.5, 0.5, 1, floor=0.3)
    assert predict(MODEL, across, {"train-mlp": 0.02}) == pytest.approx(
        predict(MODEL, across) + 0.02)


def test_overheads_need_a_run_on_one_host(tmp_path):
    path = _training_file(tmp_path / "across.json", Layout(2, 1), 0.5)
    with pytest.raises(SystemExit, match="no layout of one host"):
        step_overheads(MODEL, [path])


def test_the_command_adds_the_overhead_and_shows_both_predictions(tmp_path, capsys):
    fit_file = tmp_path / "calib.json"
    fit_file.write_text(json.dumps({"reduce_bandwidth": MODEL.reduce_bandwidth, "layouts": [
        {"hosts": layout.hosts, "ranks_per_host": layout.per_host, "cores": 2,
         "link_rate_bits": 2_000_000_000, "rows": [
             {"nbytes": n, "variant": "gcurun-tcp", "calls": 1, "checked_turns": 1,
              "seconds": [allreduce_seconds(MODEL, n, layout)] * 3}
             for n in (4 << 10, 64 << 10, 256 << 10, 1 * MIB, 16 * MIB)]}
        for layout in (Layout(1, 2), Layout(2, 1))]}))
    shm = allreduce_seconds(MODEL, 4_000_000, Layout(1, 2), single_tensor=False)
    one_host = _training_file(tmp_path / "one.json", Layout(1, 2), 0.13 + shm)
    link = allreduce_seconds(MODEL, 4_000_000, Layout(2, 1), single_tensor=False)
    across = _training_file(tmp_path / "across.json", Layout(2, 1), 0.13 + link)
    # A run holding both layouts: its one-host layout is no check of the prediction.
    assert main(["--fit", str(fit_file), "--overhead-from", str(one_host),
                 "--training", str(across), str(one_host)]) == 0
    out = capsys.readouterr().out
    assert "## Step overheads" in out and "| mlp | 1x2 | 1 |" in out
    assert "| 30.0 (30.0 to 30.0) |" in out
    assert "| 1x2 | mlp |" not in out.split("## Training steps")[1]
    assert "Training steps within 15%: 1 of 1 (errors +0% to +0%)." in out
    assert "Without the overhead within 15%: 0 of 1" in out

"""The injection kinds, declared once (:data:`swinkit.injection.KINDS`): parsing, the rank's
hooks, validate's expectations, the prediction's costs and the CLI's help all read that one
table, so a kind is added by one row plus its hook."""
from __future__ import annotations

import pytest

from swinkit import injection as spec_module
from swinkit.predict.numbers.extrapolate import Host
from swinkit.attribution.validation import CASES, EXPECTED
from swinkit.cli.validate import CASES_DEFAULT
from swinkit.predict.numbers.injected_costs import launch_delay, phase_costs
from swinkit.injection import KINDS, Injection, Kind, parse_injection, spec_help
from swinkit.measure.phases import PHASES
from swinkit.rank import inject

NAMES = ["data_ms", "compute_ms", "backward_ms", "optimizer_ms", "comm_ms"]


def test_every_reader_sees_the_kinds_of_the_table():
    """The five kinds, each landing in a phase, each with a hook, parsed, expected by validate
    in its phase, run by validate's default cases and named in the CLI's help."""
    assert [k.name for k in KINDS] == NAMES
    assert {k.name: k.phase for k in KINDS} == {
        "data_ms": "data_wait", "compute_ms": "forward", "backward_ms": "backward",
        "optimizer_ms": "optimizer", "comm_ms": "exposed_comm"}
    assert all(k.phase in PHASES for k in KINDS)
    assert set(inject.HOOKS) == set(NAMES) and EXPECTED == {k.name: k.phase for k in KINDS}
    assert set(NAMES) <= set(CASES) and set(NAMES) <= set(CASES_DEFAULT.split(","))
    for name in NAMES:
        assert getattr(parse_injection(f"{name}=5,ranks=1"), name) == 5
        assert f"{name} (" in spec_help()


def test_ddp_help_names_every_kind(capsys):
    from swinkit.cli import main
    with pytest.raises(SystemExit):
        main(["ddp", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(name in text for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_prediction_costs_each_kind_in_its_phase(name):
    """10 ms of a kind on a rank of 2 images, every 2nd iteration: 5 ms an iteration on
    average in its phase; per sample (data), 10 ms for each of 2 images, and nothing of the
    rank's own time with loader workers (they load ahead); a late launch (comm) in no phase
    but as each bucket's late start."""
    injection = Injection(**{name: 10.0}, every=2)
    host = Host(cores=2, images_per_rank=2)
    expected = {"data_ms": {"data_wait": 0.010}, "compute_ms": {"forward": 0.005},
                "backward_ms": {"backward": 0.005}, "optimizer_ms": {"optimizer": 0.005},
                "comm_ms": {}}[name]
    assert phase_costs(injection, host) == pytest.approx(expected)
    assert launch_delay(injection) == pytest.approx(0.005 if name == "comm_ms" else 0.0)
    workers = Host(cores=2, images_per_rank=2, loader_workers=2)
    assert ("data_wait" in phase_costs(injection, workers)) is False


def test_a_kind_added_to_the_table_with_its_hook_reaches_parsing_the_rank_and_the_costs(
        monkeypatch):
    """A new kind, as one more row and its hook (simulated here by patching the table): the
    spec parses it, the rank's set-up calls its hook on the object its row names, and the
    prediction costs it in its phase, none of them edited."""
    row = Kind("loss_ms", "forward", "model", "the loss occupies the device F ms more")
    kinds = KINDS + (row,)
    monkeypatch.setattr(spec_module, "KINDS", kinds)
    monkeypatch.setattr(spec_module, "KIND_BY_NAME", {k.name: k for k in kinds})
    monkeypatch.setattr(spec_module, "DELAY_FIELDS", tuple(k.name for k in kinds))
    monkeypatch.setattr(inject, "KINDS", kinds)
    import swinkit.predict.numbers.injected_costs as costs
    monkeypatch.setattr(costs, "KINDS", kinds)
    hooked = []

    def hook(target, injection, rank, cuda):
        hooked.append((target, injection.loss_ms, rank))
        return "its measured delay"
    monkeypatch.setitem(inject.HOOKS, "loss_ms", hook)

    parsed = parse_injection("loss_ms=3,ranks=1")
    assert parsed.loss_ms == 3 and parsed.describe() == "loss_ms=3,ranks=1"
    assert inject.install("model", "the model", parsed.for_rank(1), 1, False) == {
        "loss": "its measured delay"}
    assert hooked == [("the model", 3.0, 1)]
    assert inject.install("model", "the model", parsed.for_rank(0), 0, False) == {}
    assert phase_costs(Injection(loss_ms=3), Host(cores=2)) == pytest.approx({"forward": 0.003})

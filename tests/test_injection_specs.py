"""Several ``--inject`` specs in one run, each with its own ranks: what each rank receives, what
a prediction takes of it, conflicts refused by name, and the command line keeping every repeat
of the option (argparse's default would keep the last one alone, silently)."""
from __future__ import annotations

import json

import pytest

from swinkit.predict.numbers.extrapolate import Host
from swinkit.cli import main
from swinkit.predict.numbers.injected_costs import injected_costs, slowest_injected_s
from swinkit.injection import Injection, combine, parse_injection, parse_injections

TWO = ["data_ms=60,ranks=0", "backward_ms=50,ranks=1"]


def test_each_spec_keeps_its_own_ranks():
    both = parse_injections(TWO)
    assert both.for_rank(0) == Injection(data_ms=60)
    assert both.for_rank(1) == Injection(backward_ms=50)
    assert both.for_rank(2) == Injection()              # a rank no spec names: nothing
    assert both.named_ranks() == (0, 1) and both.active
    assert both.applies_to(0) and both.applies_to(1) and not both.applies_to(2)
    # the summary fields answer "is there any": the largest amount of each kind
    assert (both.data_ms, both.backward_ms, both.compute_ms) == (60, 50, 0)
    assert both.describe() == "data_ms=60,ranks=0; backward_ms=50,ranks=1"


def test_one_kind_on_different_ranks_keeps_each_amount():
    both = parse_injections(["data_ms=60,ranks=0", "data_ms=30,ranks=1"])
    assert both.for_rank(0).data_ms == 60 and both.for_rank(1).data_ms == 30


def test_a_single_spec_reads_as_before():
    one = parse_injections(["compute_ms=20,ranks=1"])
    assert one == parse_injection("compute_ms=20,ranks=1") == Injection(compute_ms=20, ranks=(1,))
    assert one.for_rank(0) == Injection() and one.for_rank(1) == Injection(compute_ms=20)
    assert not parse_injections(None).active and not parse_injections([]).active


def test_a_slower_link_reaches_every_rank_whatever_its_spec_names():
    both = parse_injections(["comm_scale=4,ranks=1", "data_ms=5,ranks=0"])
    assert both.for_rank(0).comm_scale == both.for_rank(1).comm_scale == 4


@pytest.mark.parametrize("specs, message", [
    (["data_ms=60,ranks=0", "data_ms=30,ranks=0+1"], "data_ms is given twice for rank\\(s\\) 0"),
    (["data_ms=60", "data_ms=30,ranks=1"], "data_ms is given twice for every rank"),
    (["comm_scale=2,ranks=0", "comm_scale=3,ranks=1"], "two slower links"),
    (["data_ms=60,ranks=0,every=2", "backward_ms=5,ranks=1"], "every differs between specs"),
])
def test_conflicting_specs_are_refused_by_name(specs, message):
    with pytest.raises(ValueError, match=message):
        parse_injections(specs)


def test_a_stored_injection_reads_back_the_same():
    both = parse_injections(TWO)
    stored = json.loads(json.dumps(both.to_dict()))  # lists where tuples were
    assert Injection.from_dict(stored) == both
    old = {"data_ms": 5.0, "ranks": [1], "every": 2}  # stored before specs could be combined
    assert Injection.from_dict(old) == Injection(data_ms=5, ranks=(1,), every=2)
    assert Injection.from_dict(None) == Injection()


def test_a_world_size_keeps_the_specs_whose_ranks_exist():
    both = parse_injections(["data_ms=60,ranks=0", "backward_ms=50,ranks=2"])
    assert both.for_world_size(2) == Injection(data_ms=60, ranks=(0,))
    assert both.for_world_size(3) == both
    assert not parse_injections(["data_ms=6,ranks=1", "backward_ms=5,ranks=2"]
                                ).for_world_size(1).active


def test_a_prediction_takes_each_ranks_own_costs():
    """Rank 0 loads 2 images 60 ms slower each (120 ms of data wait, no loader workers), rank
    1's backward 50 ms slower: each rank its own, and the slowest rank's 120 ms is what a naive
    prediction takes of them."""
    host = Host(cores=2, images_per_rank=2)
    extra, delay = injected_costs(parse_injections(TWO), 2, host)
    assert extra == {0: {"data_wait": pytest.approx(0.120)}, 1: {"backward": pytest.approx(0.050)}}
    assert delay is None
    assert slowest_injected_s(parse_injections(TWO), 2, host) == pytest.approx(0.120)
    late = combine([Injection(comm_ms=30, ranks=(1,)), Injection(compute_ms=20, ranks=(1,))])
    assert slowest_injected_s(late, 2, host) == pytest.approx(0.050)  # one rank, both costs


def test_the_ddp_command_keeps_every_inject_option():
    from swinkit.cli.commands import get_parser
    from swinkit.cli.launch import run_spec
    args = get_parser().parse_args(["ddp", "--preset", "test", "--inject", TWO[0],
                                    "--inject", TWO[1]])
    spec = run_spec(args)
    assert spec.injection.for_rank(0).data_ms == 60
    assert spec.injection.for_rank(1).backward_ms == 50


def test_conflicting_inject_options_exit_2_before_any_process(monkeypatch, capsys, tmp_path):
    from swinkit.runs import ddp_run
    monkeypatch.setattr(ddp_run, "launch", lambda *a, **k: pytest.fail("a process started"))
    assert main(["ddp", "--preset", "test", "--inject", "data_ms=60,ranks=1",
                 "--inject", "data_ms=30,ranks=1", "--json", str(tmp_path / "r.json")]) == 2
    assert "data_ms is given twice for rank(s) 1" in capsys.readouterr().err
    assert main(["ddp", "--preset", "test", "--inject", "data_ms=60,ranks=0",
                 "--inject", "backward_ms=5,ranks=3", "--json", str(tmp_path / "r.json")]) == 2
    assert "--inject ranks [3] do not exist at world size 2" in capsys.readouterr().err

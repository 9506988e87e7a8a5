"""DDP against one process: with synchronised batch norm (SyncBN's CPU stand-in) and the same
global batch, 2 ranks x 2 images follow the held-out loss curve of 1 process x 4 images within
the seeds' spread, so convergence can be studied cheaply in one process and confirmed with DDP.

What makes the two runs the same computation: each seed gives both the same initial weights
and the same images per step (the ranks' shards of one shuffled order, taken b at a time,
together make the one process's batch of 2b: swinkit.data.loader's sampler); batch norm
normalises over all 4 images either way. What still differs: the random crops, flips and
colour jitter (each rank draws its own), and the order of floating-point sums.

The comparison must catch a broken data-parallel update. Its planted defect: gradients summed
instead of averaged across ranks (``reduction="sum"``, swinkit.rank.grad_noise), which doubles
the step at world size 2. Run against it, the comparison fails. Measured on 2 CPU cores
(mean over the 8 checks of the held-out loss, 3 seeds): DDP 0.024 from one process, the
defect 0.278, the seeds' spread 0.141. The runs use SGD with momentum, not the presets'
AdamW: Adam divides each update by the gradient's running scale, so a gradient doubled
everywhere moves it almost exactly as before, and no loss curve can show the defect.
"""
import numpy as np
import pytest

from swinkit.experiments.converge import train_to_target
from swinkit.experiments.converge_spec import ConvergeSpec

SEEDS, STEPS, EVERY = 3, 40, 5
OVERRIDES = {"cpu_sync_bn": True,
             "optim_wrapper.optimizer": {"_delete_": True, "type": "SGD", "lr": 0.01,
                                         "momentum": 0.9, "weight_decay": 0.0}}


@pytest.fixture(scope="module")
def equivalence_data(tmp_path_factory):
    """32 training images (8 steps of 4 per pass) and 8 held-out ones."""
    from swinkit.data.synthetic import write_synthetic_ade20k
    root = tmp_path_factory.mktemp("equivalence") / "ADEChallengeData2016"
    return write_synthetic_ade20k(root, n_train=32, n_val=8, progress=None)


def held_out_curves(data_root, world_size: int, batch: int, reduction: str = "mean"):
    """(seeds, checks) held-out losses, every EVERY steps to STEPS (the target 0 is never met)."""
    spec = ConvergeSpec(preset="test", world_sizes=(world_size,), batches=(batch,),
                        lr_rules=("none",), seeds=SEEDS, target_loss=0.0, max_steps=STEPS,
                        eval_every=EVERY, data_root=str(data_root), overrides=OVERRIDES,
                        reduction=reduction).validate()
    runs = train_to_target(spec, spec.base_config(), world_size, spec.plan()[world_size],
                           quiet=True)
    return np.array([[c["held_out_loss"] for c in r["curve"]] for r in runs])


def within_spread(a: np.ndarray, b: np.ndarray) -> tuple[bool, float, float]:
    """Whether curve b follows curve a: the gap between their means over seeds, averaged over
    the checks, is no larger than the seeds' spread (max - min over seeds, the larger of the
    two runs'), averaged the same way. (verdict, gap, spread)."""
    gap = float(np.abs(a.mean(axis=0) - b.mean(axis=0)).mean())
    spread = float(np.maximum(np.ptp(a, axis=0), np.ptp(b, axis=0)).mean())
    return gap <= spread, gap, spread


def test_within_spread_by_hand():
    """Seeds' spread: max(2 - 1, 3 - 1) = 2 at the one check; means 1.5 and 2: gap 0.5."""
    a, b = np.array([[1.0], [2.0]]), np.array([[1.0], [3.0]])
    assert within_spread(a, b) == (True, 0.5, 2.0)
    assert within_spread(a, b + 3)[0] is False


@pytest.mark.slow
def test_ddp_follows_one_process_and_the_planted_defect_does_not(equivalence_data, no_orphans):
    one = held_out_curves(equivalence_data, 1, 4)
    ddp = held_out_curves(equivalence_data, 2, 2)
    defect = held_out_curves(equivalence_data, 2, 2, reduction="sum")
    assert one.shape == ddp.shape == (SEEDS, STEPS // EVERY)
    ok, gap, spread = within_spread(one, ddp)
    caught, defect_gap, defect_spread = within_spread(one, defect)
    print(f"gap from one process: DDP {gap:.3f} (spread {spread:.3f}), summed gradients "
          f"{defect_gap:.3f} (spread {defect_spread:.3f})")  # pytest -s shows the figures
    assert ok, f"DDP's held-out curve is {gap:.4f} from one process's, spread {spread:.4f}"
    assert not caught, (f"summed gradients stayed within the spread ({defect_gap:.4f} <= "
                        f"{defect_spread:.4f}): the comparison cannot see a broken update")


def test_the_ranks_batches_make_up_the_one_process_batch():
    """The premise above, checked on the sampler: 2 ranks x 2 images take, step by step, the
    same images as 1 process x 4, over 2.5 passes of 32 images (a new shuffle each pass)."""
    from swinkit.data.loader import EndlessShardSampler
    images = list(range(32))
    one = iter(EndlessShardSampler(images, 1, 0, seed=3, batch_size=4))
    ranks = [iter(EndlessShardSampler(images, 2, r, seed=3, batch_size=2)) for r in (0, 1)]
    for _ in range(20):
        assert {next(one) for _ in range(4)} == {next(it) for it in ranks for _ in range(2)}

"""Dataset and data-loader factory for a preset: what every workload feeds its model with."""
from __future__ import annotations

import copy
import signal
from pathlib import Path

import torch
from mmengine.dataset import pseudo_collate
from torch.utils.data import DataLoader, DistributedSampler, Sampler

from swinkit.config import default_data_root
from swinkit.data.errors import DataError

SYNTHETIC_HINT = ("make the synthetic set with `python -m swinkit make-data`, or point "
                  "--data-root / $SWINKIT_DATA_ROOT at the real ADEChallengeData2016 folder")


def check_data_root(root: str | Path) -> Path:
    """Raise DataError unless ``root`` holds ADE20K's training images and annotations."""
    root = Path(root)
    images, labels = root / "images" / "training", root / "annotations" / "training"
    if not root.is_dir():
        raise DataError(f"data root {root} does not exist: {SYNTHETIC_HINT}")
    for folder in (images, labels):
        if not folder.is_dir() or not any(folder.iterdir()):
            raise DataError(f"data root {root} has no files in {folder.relative_to(root)}/: "
                            f"{SYNTHETIC_HINT}")
    return root


def ensure_data(cfg, progress=print) -> Path:
    """The config's data root, writing the synthetic default first if that is what it names."""
    if Path(cfg.data_root) == default_data_root():
        from swinkit.data.synthetic import write_synthetic_ade20k
        write_synthetic_ade20k(cfg.data_root, progress=progress)
    return check_data_root(cfg.data_root)


def build_dataset(cfg):
    """MMSeg ADE20K dataset (failures name the sample) with the preset's training pipeline."""
    from mmseg.registry import DATASETS

    import swinkit.data.dataset  # noqa: F401  registers CheckedADE20KDataset
    from swinkit.model.registry import use_mmseg_scope
    use_mmseg_scope()

    check_data_root(cfg.data_root)
    spec = copy.deepcopy(cfg.train_dataset.to_dict())
    spec["type"] = "CheckedADE20KDataset"
    return DATASETS.build(spec)


def build_loader(cfg, dataset=None, rank: int = 0, world_size: int = 1,
                 workers: int | None = None, seed: int = 0, timeout_s: float = 0) -> DataLoader:
    """A loader over this rank's shard (``DistributedSampler``), ``images_per_rank`` per batch.

    Args:
        workers: loader worker processes per rank (default: the preset's ``loader_workers``).
        timeout_s: seconds to wait for a worker's batch (0 = forever); see torch's DataLoader.
    """
    dataset = dataset if dataset is not None else build_dataset(cfg)
    workers = cfg.loader_workers if workers is None else workers
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    if len(dataset) < world_size * cfg.images_per_rank:
        raise DataError(f"{len(dataset)} training images at {cfg.data_root} cannot fill one batch "
                        f"of {cfg.images_per_rank} on each of {world_size} ranks")
    sampler = EndlessShardSampler(dataset, world_size, rank, seed, cfg.images_per_rank)
    return DataLoader(dataset, batch_size=cfg.images_per_rank, sampler=sampler,
                      num_workers=workers, collate_fn=pseudo_collate, drop_last=True,
                      # Config keys for the what-ifs; the defaults are today's loader. With the
                      # endless sampler the iterator never restarts, so persistent_workers can
                      # only matter for a loader that is rebuilt.
                      persistent_workers=workers > 0 and bool(cfg.get("persistent_workers", True)),
                      pin_memory=bool(cfg.get("pin_memory", False)) and torch.cuda.is_available(),
                      timeout=timeout_s if workers else 0,
                      generator=torch.Generator().manual_seed(seed))


class EndlessShardSampler(Sampler):
    """This rank's shard, pass after pass without end, each pass shuffled as
    ``DistributedSampler`` shuffles epoch ``pass`` (so pass 0 is its epoch 0).

    One endless stream means the DataLoader's iterator, and its workers' prefetching, never
    restart: epoch boundaries do not show in measured iterations (with a restarting iterator,
    the first batch of every epoch waits for workers with nothing prefetched, and a small data
    set at a large world size has an epoch every few iterations). Each pass keeps whole batches
    only, so no batch straddles two passes. Written here rather than taken from MMEngine's
    ``InfiniteSampler``, which reads rank and world size from the process group: the loader
    benchmark and the tests build any rank's shard explicitly.
    """

    def __init__(self, dataset, num_replicas: int, rank: int, seed: int, batch_size: int):
        self.shard = DistributedSampler(dataset, num_replicas=num_replicas, rank=rank,
                                        shuffle=True, seed=seed, drop_last=True)
        self.batch_size = batch_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """The pass the next ``iter()`` starts at."""
        self.epoch = epoch

    def __iter__(self):
        epoch = self.epoch
        while True:
            self.shard.set_epoch(epoch)
            indices = list(self.shard)
            yield from indices[:len(indices) - len(indices) % self.batch_size]
            epoch += 1


def batches(loader: DataLoader):
    """Endless iteration over a loader (its sampler is endless: one iterator, never restarted).

    Worker failures come out as :class:`LoaderError` with what happened: torch's own messages
    ("DataLoader worker (pid 123) is killed by signal: Killed") do not say what to look at.
    """
    iterator = iter(loader)
    while True:
        try:
            batch = next(iterator)
        except RuntimeError as exc:
            raise _loader_error(exc, loader, iterator) from exc
        yield batch


class LoaderError(RuntimeError):
    """A data-loader worker died or stalled."""


def _loader_error(exc: RuntimeError, loader: DataLoader, iterator) -> RuntimeError:
    text = str(exc)
    # torch words a dead worker two ways depending on which thread notices first; the worker
    # processes' exit codes say what happened either way.
    for worker in getattr(iterator, "_workers", []):
        worker.join(timeout=1)
        code = worker.exitcode
        if code is not None and code < 0:
            hint = ", possible host OOM" if -code == signal.SIGKILL else ""
            return LoaderError(f"loader worker died (signal {-code}{hint}; pid {worker.pid})")
    if "timed out" in text:
        return LoaderError(f"loader timed out after {loader.timeout:g} s (a worker stalled)")
    if "exited unexpectedly" in text:
        return LoaderError(f"loader worker exited unexpectedly ({text})")
    return exc

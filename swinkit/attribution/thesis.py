"""Published figures of the thesis "Evaluation of Scalability for Distributed Data-Parallel Training
of Swin Transformer V2" (Garrett, University of Pittsburgh, 2023), section 5.2.

Speedups are whole-training-time ratios T(1 GPU) / T(N GPUs) of the weak-scaling experiment
(Table 3: 160K/N iterations at 8 images per GPU). Only values stated in the text are here; the
figures' other points are not legible in the source.
"""
from swinkit.attribution import scaling

THESIS_SPEEDUPS = {
    "CRC V100 (PCIe)": {1: 1.0, 2: 1.43, 4: 1.46},
    "CRC A100 (PCIe)": {1: 1.0, 2: 1.75, 4: 1.80},
    "CRC A100_NVLINK": {1: 1.0, 2: 1.17},
}
THESIS_BASE_ITERS = 160_000


def table3_projection(measured: dict, base_iters: int = THESIS_BASE_ITERS) -> dict[int, float]:
    """Projected hours for the thesis's weak-scaling run (base_iters / N iterations)."""
    return {ws: scaling.projected_training_s(m.iter_s, ws, base_iters) / 3600
            for ws, m in measured.items()}

"""Predictions from a stored held-out report (``tools/attribute.py --stored``, or the one
asv's bench_predict kept) at sizes it did not measure, with the ring model's communication:
:func:`from_stored`."""
from __future__ import annotations

from swinkit.predict.numbers.links import Link, fit_link_or_bandwidth, ring_target
from swinkit.predict.supervisor.held_out_parts import predict_one


def from_stored(stored: dict, world_sizes, link: Link | None = None, nodes=(),
                inter: Link | None = None) -> dict:
    """Predictions from a stored ``--predict`` JSON at sizes it did not measure: from its
    bases, with the ring model's communication (``link``: stated, or fitted to the bucket
    timings it stored at its targets; ``nodes``: that many nodes of the basis's size each,
    over the ``inter`` link)."""
    launches = []
    for row in stored["launches"]:
        basis = row["basis"]
        intra = link or _fitted(row, basis)
        g = basis["costs"]["world_size"]
        targets = {str(ws): ring_target(basis["bucket_bytes"], ws, 1, intra) for ws in world_sizes}
        targets.update({f"{k}x{g}": ring_target(basis["bucket_bytes"], g, k, intra, inter)
                        for k in nodes})  # k nodes of g ranks
        t1 = row["t1_s"]
        launches.append({"launch": row["launch"], "t1_s": t1,
                         "targets": {key: predict_one(basis, t1, t) for key, t in targets.items()}})
    sizes = list(launches[0]["targets"]) if launches else []
    return {"preset": stored["preset"], "from": stored["from"], "targets": sizes,
            "launches": launches, "summary": {}, "stored": True}


def _fitted(row: dict, basis: dict) -> Link:
    """The link fitted to the bucket all-reduces a stored prediction timed at its targets."""
    points = [(b, int(ws), t) for ws, p in row["targets"].items()
              if p.get("comm_source") == "timed at N'"
              for b, t in zip(basis["bucket_bytes"], p["bucket_comm_s"])]
    try:
        return fit_link_or_bandwidth(points)[0]
    except ValueError as exc:
        raise ValueError(f"--predict from stored results: {exc}; state the link with "
                         "--link GBPS,LATENCY_US") from None

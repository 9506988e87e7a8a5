"""Loader headroom: can the loaders feed the model at this world size, and when would they not?"""
from __future__ import annotations

import math


def loader_headroom(supply_per_rank: dict[int, float], demand_per_rank: dict[int, float]) -> dict:
    """Supply / demand per world size, and the first world size at which loading binds.

    Beyond the measured world sizes the machine's loaders are assumed to supply no more in
    total than the most they did (the cores are shared), while demand grows with every rank:
    a projection, labelled as such.
    """
    rows = {ws: {"supply": supply_per_rank[ws], "demand": demand_per_rank[ws],
                 "headroom": supply_per_rank[ws] / demand_per_rank[ws]}
            for ws in sorted(set(supply_per_rank) & set(demand_per_rank))}
    binding = next((ws for ws, r in rows.items() if r["headroom"] < 1), None)
    projected = None
    if binding is None and rows:
        total_supply = max(ws * supply_per_rank[ws] for ws in rows)
        demand = demand_per_rank[max(rows)]
        projected = math.floor(total_supply / demand) + 1
    return {"per_world_size": rows, "binds_at_world_size": binding,
            "projected_binding_world_size": projected}

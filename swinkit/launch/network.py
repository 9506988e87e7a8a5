"""Which address and interface a multi-node run talks on, checked before any process starts.

Two choices torch makes from the host name unless told otherwise, and both can strand a node:

* the rendezvous publishes ``MASTER_ADDR = socket.getfqdn()`` of the node that hosts group
  rank 0 (not the ``--rdzv-endpoint`` host); a name the other nodes cannot resolve parks their
  ranks in the TCPStore connect. ``local_addr`` replaces it, as torchrun's ``--local-addr``.
* gloo (the whole run on CPU; the clock-offset group beside NCCL) binds the interface the host
  name resolves to, which may be 127.0.1.1 or an address the other nodes cannot route to, while
  NCCL, told by ``NCCL_SOCKET_IFNAME``, works. ``GLOO_SOCKET_IFNAME`` names gloo's interface.
"""
from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping, Sequence

GLOO_IFNAME = "GLOO_SOCKET_IFNAME"
NCCL_IFNAME = "NCCL_SOCKET_IFNAME"


def host_interfaces() -> list[str] | None:
    """Names of this host's network interfaces; None where the OS cannot list them."""
    try:
        return [name for _, name in socket.if_nameindex()]
    except OSError:
        return None


def check_local_addr(value) -> None:
    """ValueError unless ``value`` is None or a bare host name / IP address (no port)."""
    if value is None:
        return
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ValueError(f"local_addr must be this node's host name or IP address, got {value!r}")
    try:
        ipaddress.ip_address(value)  # IPv6 addresses hold colons, and are fine
        return
    except ValueError:
        pass
    if ":" in value or "/" in value:
        raise ValueError(f"local_addr is an address without port or scheme, got {value!r}")


def gloo_ifname_from_nccl(nccl_value: str, interfaces: Sequence[str]) -> str | None:
    """The interface of this host that ``NCCL_SOCKET_IFNAME`` selects, in gloo's syntax.

    NCCL reads comma-separated name prefixes ("eth" matches eth0), exact names after "=", and
    exclusions after "^"; gloo wants exact names, and more than one makes it stripe over all
    of them. So: the first interface the first matching entry selects, or None (an exclusion
    list, or nothing here matches: then gloo keeps its own choice).
    """
    if not nccl_value or nccl_value.startswith("^"):
        return None
    exact = nccl_value.startswith("=")
    for entry in filter(None, nccl_value.lstrip("=").split(",")):
        if entry in interfaces:
            return entry
        prefixed = sorted(i for i in interfaces if not exact and i.startswith(entry))
        if prefixed:
            return prefixed[0]
    return None


def gloo_socket_env(env: Mapping[str, str], interfaces: Sequence[str] | None) -> dict[str, str]:
    """What to add to the ranks' environment so gloo uses the interface NCCL was told to.

    A user who set ``NCCL_SOCKET_IFNAME`` for a multi-node run has named the interface the
    nodes reach each other on; gloo, left alone, would bind what the host name resolves to.
    An explicit ``GLOO_SOCKET_IFNAME`` always wins.
    """
    if env.get(GLOO_IFNAME) or not env.get(NCCL_IFNAME) or interfaces is None:
        return {}
    name = gloo_ifname_from_nccl(env[NCCL_IFNAME], interfaces)
    return {GLOO_IFNAME: name} if name else {}


def check_gloo_ifname(env: Mapping[str, str], interfaces: Sequence[str] | None) -> None:
    """ValueError when ``GLOO_SOCKET_IFNAME`` names an interface this host does not have
    (gloo would fail inside every rank, after the rendezvous, with a less plain message)."""
    value = env.get(GLOO_IFNAME)
    if not value or interfaces is None:
        return
    # split as torch does (on commas, nothing stripped): "eth0, ib0" names " ib0"
    unknown = [n for n in value.split(",") if n not in interfaces]
    if unknown:
        raise ValueError(f"{GLOO_IFNAME}={value!r}: this host has no interface "
                         f"{', '.join(map(repr, unknown))} "
                         f"(it has {', '.join(sorted(interfaces))})")

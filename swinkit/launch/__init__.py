"""Launching ranks on torch.distributed's elastic engine, and naming the one that failed (this
package was swinkit.dist: the usual .gitignore templates and packaging tools treat dist/ as
build output).

    supervisor.py the supervisor: validate, start the agent in its own session, watchdog, stop
    agent.py     ``python -m swinkit.launch.agent RUN_DIR``: torch's ``elastic_launch`` per node
    rank.py      what every rank runs: process group, workload entry point, heartbeats, errors
    diagnose.py  root cause from the records a run leaves (killed, raised, hung, never joined)
    network.py   the address and interface nodes talk on (--local-addr, GLOO_SOCKET_IFNAME)
    terminate.py SIGTERM as an exception (a supervisor stopped from outside still cleans up), and
                 stopping the process groups and sessions a job started
    cost.py      what a launch costs before any work: a no-op launch timed, phase by phase

Knows nothing of the workload: entry points are "module:function" strings.
"""
from swinkit.launch.supervisor import LaunchConfig, LaunchError, RunResult, free_port, launch

__all__ = ["LaunchConfig", "LaunchError", "RunResult", "free_port", "launch"]

"""Shared fixtures: a small synthetic ADE20K per test session, and the test preset.

The suite is a CPU + gloo suite: on a GPU machine it hides the GPUs (``CUDA_VISIBLE_DEVICES=""``,
inherited by every launched rank) so that the tests see the machine they were written for. A
run that selects GPU tests (``pytest -m gpu``) keeps the GPUs; tests that need them carry the
``gpu`` marker (``@requires_gpu(n)``) and skip where fewer GPUs can be seen.
"""
from __future__ import annotations

import itertools
import os
import re
import shutil
import time

import pytest

HIDE_GPUS = ""          # CUDA_VISIBLE_DEVICES value under which CUDA sees no device
GPUS_HIDDEN = pytest.StashKey[bool]()   # set on the config: did this run hide the GPUs?
NVIDIA_DRIVER = "/proc/driver/nvidia/version"  # present where the kernel driver is loaded
MAX_MARK_NAMES = 12     # -m expressions name a handful of markers; more is not worth 2**n tries


def selects_gpu_tests(markexpr: str) -> bool:
    """Whether a ``-m`` expression can select a test marked ``gpu``: the expression names
    ``gpu`` and some combination of the other markers it names, with ``gpu``, satisfies it.

    >>> [selects_gpu_tests(e) for e in ("", "not slow", "gpu", "gpu and not slow", "not gpu")]
    [False, False, True, True, False]
    >>> selects_gpu_tests("not (slow or gpu)"), selects_gpu_tests("slow or not gpu")
    (False, True)
    """
    from _pytest.mark import expression  # pytest's own -m grammar and evaluation

    if not re.search(r"\bgpu\b", markexpr or ""):
        return False
    # a bad expression is reported by pytest itself; keep the GPUs hidden meanwhile
    # (pytest 8 raises its ParseError, pytest 9 a SyntaxError)
    try:
        expr = expression.Expression.compile(markexpr)
    except (SyntaxError, getattr(expression, "ParseError", SyntaxError)):
        return False
    others = sorted(set(re.findall(r"[A-Za-z_]\w*", markexpr)) - {"and", "or", "not", "gpu"})
    if len(others) > MAX_MARK_NAMES:
        raise ValueError(f"-m expression names {len(others)} markers besides gpu; at most "
                         f"{MAX_MARK_NAMES} are supported: {markexpr!r}")

    def selects(marks: frozenset) -> bool:  # a test carrying exactly ``marks``
        return expr.evaluate(lambda name, /, **kwargs: name in marks)
    return any(selects(frozenset({"gpu", *chosen}))
               for k in range(len(others) + 1) for chosen in itertools.combinations(others, k))


def pytest_configure(config) -> None:
    """Hide the GPUs before anything initialises CUDA, unless the run selects GPU tests.

    Runs before any test module is imported (this conftest is loaded first), so the modules'
    own ``torch.cuda`` checks and every rank they launch see no GPU.
    """
    import sys
    hide = not selects_gpu_tests(config.option.markexpr)
    config.stash[GPUS_HIDDEN] = hide
    if hide:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            raise pytest.UsageError("CUDA was initialised before tests/conftest.py could hide "
                                    "the GPUs: run pytest in a fresh process")
        os.environ["CUDA_VISIBLE_DEVICES"] = HIDE_GPUS
    import torch
    torch.set_num_threads(1)


def tool_module(name: str):
    """``tools/<name>.py`` loaded as module ``name`` (the tools are scripts, not a package),
    registered in ``sys.modules`` first: a dataclass in it looks its own module up."""
    import importlib.util
    import sys
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        name, Path(__file__).resolve().parents[1] / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def requires_gpu(n: int = 1) -> pytest.MarkDecorator:
    """Marks a test that needs ``n`` real GPUs: it runs under ``pytest -m gpu`` and skips where
    fewer can be seen (``@requires_gpu(2)`` is ``@pytest.mark.gpu(n=2)``)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    return pytest.mark.gpu(n=n)


def gpu_skip_reason(needed: int, visible: int, hidden: bool) -> str | None:
    """Why a test needing ``needed`` GPUs cannot run where ``visible`` are seen (None: it can).

    >>> gpu_skip_reason(1, 0, hidden=True)
    'GPUs are hidden in this run: select GPU tests with pytest -m gpu'
    >>> gpu_skip_reason(2, 1, hidden=False), gpu_skip_reason(1, 1, hidden=False)
    ('needs 2 GPU(s), 1 visible', None)
    """
    if visible >= needed:
        return None
    if hidden:
        return "GPUs are hidden in this run: select GPU tests with pytest -m gpu"
    return f"needs {needed} GPU(s), {visible} visible"


def pytest_runtest_setup(item) -> None:
    """Skip a ``gpu`` test (``@pytest.mark.gpu`` or ``@requires_gpu(n)``) without its GPUs."""
    marker = item.get_closest_marker("gpu")
    if marker is None:
        return
    import torch
    needed = int(marker.kwargs.get("n", marker.args[0] if marker.args else 1))
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    hidden = item.config.stash.get(GPUS_HIDDEN, False)
    if not hidden and visible == 0 and os.path.exists(NVIDIA_DRIVER):
        # a GPU check that skips everything would pass with no table: say why it cannot run
        pytest.fail("this machine has an NVIDIA driver but torch sees no GPU (a CPU build of "
                    f"torch {torch.__version__}, or CUDA_VISIBLE_DEVICES hides them): the GPU "
                    "check cannot run here", pytrace=False)
    reason = gpu_skip_reason(needed, visible, hidden)
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session", autouse=True)
def temp_dir_of_the_session(request):
    """The session's temp dir (TMPDIR, inherited by every launched process): a short folder
    of its own in the usual one, removed after a session without failures. A failed launch
    keeps its run folder in the temp dir by design (its rank records are the evidence), and
    the fault tests fail a dozen launches per session: in /tmp they piled up with every run
    of the suite. Short: DataLoader workers and asv's fork server bind Unix sockets inside it,
    whose paths Linux caps at 107 characters (pytest's own base folder is 29 longer)."""
    import tempfile
    before = os.environ.get("TMPDIR")
    scratch = tempfile.mkdtemp(prefix="swk-")
    os.environ["TMPDIR"] = scratch
    tempfile.tempdir = None  # re-read TMPDIR in this process
    yield scratch
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before
    tempfile.tempdir = None
    if request.session.testsfailed == 0:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="session")
def data_root(tmp_path_factory):
    from swinkit.data.synthetic import write_synthetic_ade20k
    root = tmp_path_factory.mktemp("ade") / "ADEChallengeData2016"
    return write_synthetic_ade20k(root, n_train=8, n_val=2, progress=None)


@pytest.fixture
def one_rank_group(tmp_path):
    """A gloo world of one, in this process: DDP and collectives without launching ranks."""
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def data_copy(data_root, tmp_path):
    """A private copy a test may corrupt."""
    root = tmp_path / "ADEChallengeData2016"
    shutil.copytree(data_root, root)
    return root


@pytest.fixture
def test_cfg(data_root):
    from swinkit.config import load_config
    return load_config("test", data_root)


# Every process this test session starts inherits the mark, so a launch of another checkout's
# tests or of a user's command on the same machine is not taken for this session's orphan.
SESSION_MARK = "SWINKIT_TEST_SESSION"
os.environ.setdefault(SESSION_MARK, f"{os.getpid()}-{time.time_ns()}")


def project_processes() -> list:
    """Live processes started by a swinkit launch of this test session (they carry
    SWINKIT_RUN_DIR and this session's mark)."""
    import psutil
    found = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            env = p.environ()
            if "SWINKIT_RUN_DIR" in env and env.get(SESSION_MARK) == os.environ[SESSION_MARK]:
                found.append(p)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def no_orphans():
    """Fails the test if any process of a swinkit launch is alive after it."""
    import time
    before = {p.pid for p in project_processes()}
    yield
    deadline = time.monotonic() + 10
    while True:
        left = [p for p in project_processes() if p.pid not in before]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"orphan processes: {[(p.pid, p.cmdline()[:4]) for p in left]}"


@pytest.fixture
def asv_scratch(tmp_path, data_root):
    """Run asv on this checkout with results, HTML and machine file in a scratch folder.

    Returns ``run(asv_args, **env) -> CompletedProcess``; ``run.results`` is the results folder,
    ``run.commit`` the commit asv files them under.
    The test preset and the session's small synthetic data are used; HOME points at the scratch
    folder so the user's ~/.asv-machine.json is left alone.
    """
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from swinkit.run_suite import ROOT, read_conf
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    if not commit:
        pytest.skip("not a git checkout")
    conf = read_conf()
    conf.update(results_dir=str(tmp_path / "results"), html_dir=str(tmp_path / "html"),
                env_dir=str(tmp_path / "env"), repo=str(ROOT),
                benchmark_dir=str(Path(ROOT) / "benchmarks"))
    (tmp_path / "asv.conf.json").write_text(json.dumps(conf))
    base_env = dict(os.environ, HOME=str(tmp_path), SWINKIT_PRESET="test",
                    SWINKIT_DATA_ROOT=str(data_root), SWINKIT_ASV_COMMIT=commit,  # as run_suite
                    SWINKIT_ASV_RESULTS=str(tmp_path / "results"))
    asv = [sys.executable, "-m", "asv", "--config", str(tmp_path / "asv.conf.json")]
    subprocess.run(asv + ["machine", "--yes"], env=base_env, check=True, capture_output=True,
                   timeout=60)

    def run(args, timeout=900, **env):
        if args and args[0] == "run":
            args = [*args[:1], "--python=same", "--quick", "--set-commit-hash", commit, *args[1:]]
        return subprocess.run(asv + list(args), env=dict(base_env, **env), capture_output=True,
                              text=True, timeout=timeout)

    run.results = tmp_path / "results"
    run.html = tmp_path / "html"
    run.commit = commit
    return run


def asv_result_values(results_dir, name):
    """The stored values of benchmark ``name`` (one per parameter combination)."""
    import json
    files = [p for p in results_dir.rglob("*.json")
             if p.name not in ("machine.json", "benchmarks.json")]
    assert files, f"no asv results under {results_dir}"
    return json.loads(files[0].read_text())["results"][name][0]


class ForeignLoad:
    """Cores' worth of CPU that anything outside this test's process tree took while the block
    ran: the machine's busy time (/proc/stat, hypervisor steal included) minus what this process
    and its waited-for descendants used (getrusage). 0 on an idle machine; NaN where unreadable.

    On a loaded machine contention changes what an injected cost adds (a rank that waits frees
    a core for the others), so tests hold exact amounts only when this stays small. Measured
    over the whole run, unlike a snapshot of the run queue before and after it, which misses a
    burst in between. Kernel work the run itself causes (gloo's loopback traffic, file writes)
    counts as foreign too, so the figure errs towards "busy", which only skips a check.
    """
    BUSY_FIELDS = (0, 1, 2, 5, 6, 7)   # user nice system irq softirq steal (not idle, iowait)

    def __enter__(self) -> "ForeignLoad":
        self._start = self._sample()
        return self

    def __exit__(self, *exc) -> None:
        end = self._sample()
        if self._start is None or end is None:
            self.cores = float("nan")
            return
        (t0, busy0, own0), (t1, busy1, own1) = self._start, end
        self.cores = max((busy1 - busy0) - (own1 - own0), 0.0) / max(t1 - t0, 1e-9)

    @classmethod
    def _sample(cls):
        import os
        import resource
        import time
        try:
            with open("/proc/stat") as f:
                fields = f.readline().split()[1:]
        except OSError:
            return None
        busy = sum(int(fields[i]) for i in cls.BUSY_FIELDS) / os.sysconf("SC_CLK_TCK")
        own = sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                     resource.getrusage(resource.RUSAGE_CHILDREN)))
        return time.monotonic(), busy, own

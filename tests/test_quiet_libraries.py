"""DeepSpeed is imported only by the DeepSpeed engine, and says nothing on stdout there."""
import importlib.util
import json
import subprocess
import sys

import pytest

HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None

_BUILD_MODEL = """
import json, sys
from swinkit.config import load_config
from swinkit.model.segmentor import build_segmentor
build_segmentor(load_config("test", device="cpu"))
strategy = sys.modules.get("mmengine._strategy.deepspeed")
print(json.dumps({"deepspeed": "deepspeed" in sys.modules,
                  "mmengine_strategy_loaded": strategy is not None,
                  "mmengine_sees": None if strategy is None else repr(strategy.deepspeed)}))
"""

_IMPORT_DEEPSPEED = """
import sys
import swinkit.model.segmentor, mmseg.models   # MMEngine's strategies first, DeepSpeed held off
from swinkit.quiet_libraries import import_deepspeed
ds = import_deepspeed()
import logging
streams = [h.stream for h in logging.getLogger("DeepSpeed").handlers if hasattr(h, "stream")]
print("stdout handlers:", sum(s in (sys.stdout, sys.__stdout__) for s in streams), file=sys.stderr)
import deepspeed.comm  # the engine's own modules import as usual after the hold-off
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180)


def test_building_the_model_imports_no_deepspeed():
    """MMSegmentation's models import MMEngine's strategies, whose DeepSpeed module imports
    DeepSpeed where it is installed; a swinkit process that builds the model loads that module
    with DeepSpeed held off, and leaves DeepSpeed unimported."""
    proc = _run(_BUILD_MODEL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["deepspeed"] is False
    assert seen["mmengine_strategy_loaded"] is True  # the hold-off was exercised, not bypassed
    assert seen["mmengine_sees"] == "None"


@pytest.mark.skipif(not HAS_DEEPSPEED, reason="DeepSpeed is not installed")
def test_import_deepspeed_keeps_stdout_clean():
    """Imported for its engine, DeepSpeed's import-time warning and its logger go to stderr."""
    proc = _run(_IMPORT_DEEPSPEED)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == ""
    assert "stdout handlers: 0" in proc.stderr

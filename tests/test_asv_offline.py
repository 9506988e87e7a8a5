"""asv's published HTML works offline: no remote address left, and a real browser renders it.

* a real ``asv publish`` of a tiny synthetic project (three commits, one benchmark file) is
  rewritten by swinkit.report.asv_offline; no .html in it may name an http(s) address in a
  src or href (with a stand-in asset cache, so this runs without npm);
* the rewrite's unit behaviour on hand-written HTML: integrity kept when the bytes match,
  dropped (with a comment) when not, all-or-nothing on a missing or unknown asset;
* headless Chromium (Debian's ``chromium``; skipped with the reason when it is not installed or
  the assets were never fetched) loads the rewritten page from a server on 127.0.0.1 with every
  other address unreachable, and must see no failed or remote request, no script error, and a
  flot canvas with a plotted line, on the front page and on a benchmark's graph. The same
  harness on the page as asv published it must see the CDN loads fail (so it can fail).
"""
from __future__ import annotations

import base64
import fcntl
import functools
import hashlib
import http.server
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import tool_module

from swinkit.report import asv_offline as off

ROOT = Path(__file__).resolve().parents[1]
BENCH = "bench_tiny.track_value"

TINY_BENCH = '''
from pathlib import Path


def track_value():
    """A number the test sets per commit, so the graph has a slope."""
    return float((Path(__file__).parent / "value.txt").read_text())


track_value.unit = "widgets"
'''


def _git(cwd, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """``asv publish`` of a tiny project with three commits (values 3, 5, 4): the html folder."""
    pytest.importorskip("asv")
    tmp = tmp_path_factory.mktemp("asv-tiny")
    proj = tmp / "proj"
    (proj / "benchmarks").mkdir(parents=True)
    (proj / "benchmarks" / "__init__.py").write_text("")
    (proj / "benchmarks" / "bench_tiny.py").write_text(TINY_BENCH)
    conf = {"version": 1, "project": "tiny", "repo": ".", "branches": ["main"], "dvcs": "git",
            "environment_type": "virtualenv", "benchmark_dir": "benchmarks",
            "results_dir": str(tmp / "results"), "html_dir": str(tmp / "html"),
            "env_dir": str(tmp / "env")}
    (proj / "asv.conf.json").write_text(json.dumps(conf))
    _git(proj, "init", "-q", "-b", "main")
    env = dict(os.environ, HOME=str(tmp))  # asv's machine file goes to the scratch HOME
    asv = [sys.executable, "-m", "asv", "--config", str(proj / "asv.conf.json")]
    subprocess.run(asv + ["machine", "--yes"], cwd=proj, env=env, check=True,
                   capture_output=True, timeout=120)
    for i, value in enumerate((3, 5, 4)):
        (proj / "benchmarks" / "value.txt").write_text(str(value))
        _git(proj, "add", "-A")
        _git(proj, "commit", "-q", "-m", f"commit {i}", "--date", f"2024-01-0{i + 1}T12:00:00")
        commit = _git(proj, "rev-parse", "HEAD")
        run = subprocess.run(asv + ["run", "--python=same", "--quick", "--set-commit-hash",
                                    commit], cwd=proj, env=env, capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
    pub = subprocess.run(asv + ["publish"], cwd=proj, env=env, capture_output=True, text=True,
                         timeout=300)
    assert pub.returncode == 0, pub.stdout + pub.stderr
    html = tmp / "html"
    assert off.remote_references((html / "index.html").read_text()), \
        "asv's page no longer loads anything remote: this test has nothing left to check"
    return html


def _copy(html: Path, dest: Path) -> Path:
    shutil.copytree(html, dest)
    return dest


def fake_cache(path: Path, skip: tuple[str, ...] = ()) -> Path:
    """A stand-in asset cache: every file the page needs, with placeholder bytes."""
    for pkg in off.PACKAGES:
        if pkg.name in skip:
            continue
        folder = path / pkg.folder
        files = {}
        for dest in pkg.files.values():
            data = f"/* stand-in for {pkg.name} {dest} */\n".encode()
            (folder / dest).parent.mkdir(parents=True, exist_ok=True)
            (folder / dest).write_bytes(data)
            files[dest] = hashlib.sha256(data).hexdigest()
        (folder / off.FETCHED).write_text(json.dumps(
            {"name": pkg.name, "version": pkg.version, "wanted": pkg.version, "files": files}))
    return path


def _html_files(html: Path):
    return [p for p in html.rglob("*.html") if "vendor" not in p.relative_to(html).parts]


# --- (a) a real asv publish output ----------------------------------------------------------

@pytest.mark.slow
def test_published_page_names_no_remote_address_after_rewrite(published, tmp_path):
    html = _copy(published, tmp_path / "html")
    before = off.remote_references((html / "index.html").read_text())
    assert any(tag == "script" for tag, _, _ in before)
    reps = off.make_offline(html, fake_cache(tmp_path / "cache"))
    for page in _html_files(html):
        text = page.read_text()
        assert off.remote_references(text) == [], page
        assert "http://" not in _src_href_values(text) and "https://" not in _src_href_values(text)
    # every library the page loaded remotely is now a file in the folder
    local = [r.local for r in reps if r.local]
    assert len(local) == len([r for r in before if r[0] != "a"])
    for rel in local:
        assert (html / rel).is_file(), rel
    # the redirect to asv's "no internet" page is gone
    index = (html / "index.html").read_text()
    assert 'window.location = "error.html"' not in index
    assert 'onerror="js_load_failure()"' not in index


def _src_href_values(text: str) -> str:
    import re
    return " ".join(m.group(2) for m in re.finditer(r"""\b(src|href)\s*=\s*["']([^"']*)""", text))


def test_missing_asset_fails_naming_it_and_writes_nothing(published, tmp_path):
    html = _copy(published, tmp_path / "html")
    original = {p: p.read_bytes() for p in html.rglob("*") if p.is_file()}
    with pytest.raises(off.OfflineAssetsError) as err:
        off.make_offline(html, fake_cache(tmp_path / "cache", skip=("bootstrap",)))
    assert "bootstrap@3.1.1" in str(err.value)
    assert "bootstrap.min.css" in str(err.value) and "bootstrap.min.js" in str(err.value)
    assert "flot" not in str(err.value)  # only what is missing is named
    assert {p: p.read_bytes() for p in html.rglob("*") if p.is_file()} == original
    assert not (html / "vendor").exists()


def test_a_changed_cache_file_is_refused(published, tmp_path):
    html = _copy(published, tmp_path / "html")
    cache = fake_cache(tmp_path / "cache")
    (cache / "jquery-3.3.1" / "jquery.min.js").write_text("/* edited */")
    with pytest.raises(off.OfflineAssetsError, match="jquery.min.js is not the file that was "
                                                     "fetched"):
        off.make_offline(html, cache)
    assert not (html / "vendor").exists()


def _fetch_module():
    return tool_module("fetch_asv_assets")


def test_fetch_keeps_only_the_files_the_page_needs(tmp_path):
    import io
    import tarfile
    fetch = _fetch_module()
    pkg = off.PACKAGE["bootstrap"]
    tgz = tmp_path / "bootstrap-3.1.1.tgz"
    contents = {f"package/{inner}": inner.encode() for inner in pkg.files}
    contents["package/LICENSE"] = b"MIT"
    contents["package/docs/unneeded.js"] = b"x"
    with tarfile.open(tgz, "w:gz") as tar:
        for name, data in contents.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    hashes = fetch.extract(tgz, pkg, "3.1.1", tmp_path / "out")
    assert set(hashes) == set(pkg.files.values()) | {"LICENSE"}
    assert (tmp_path / "out" / "css" / "bootstrap.min.css").read_bytes() == \
        b"dist/css/bootstrap.min.css"
    assert not list((tmp_path / "out").rglob("unneeded.js"))
    # a package without a file the page needs is refused, naming the file
    with tarfile.open(tgz, "w:gz") as tar:
        info = tarfile.TarInfo("package/LICENSE")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"MIT"))
    with pytest.raises(RuntimeError, match="bootstrap@3.1.1: the package has no dist/js/"):
        fetch.extract(tgz, pkg, "3.1.1", tmp_path / "out2")


def _suite_module():
    return tool_module("suite")


def test_suite_makes_the_published_page_offline(published, tmp_path, monkeypatch, capsys):
    """tools/suite.py after its publish step: rewritten page, or exit 1 naming what is missing."""
    suite = _suite_module()
    html = _copy(published, tmp_path / "html")
    monkeypatch.setattr(suite, "publish", lambda: html)
    monkeypatch.setenv("SWINKIT_ASV_ASSETS", str(tmp_path / "empty-cache"))
    original = (html / "index.html").read_text()
    assert suite.main(["--publish-only"]) == 1
    err = capsys.readouterr().err
    assert "jquery@3.3.1 is not in the asset cache" in err and "tools/fetch_asv_assets.py" in err
    assert (html / "index.html").read_text() == original

    monkeypatch.setenv("SWINKIT_ASV_ASSETS", str(fake_cache(tmp_path / "cache")))
    assert suite.main(["--publish-only"]) == 0
    out = capsys.readouterr().out
    assert "remote reference(s) replaced" in out and "HTML history:" in out
    assert off.remote_references((html / "index.html").read_text()) == []


def test_fetch_script_without_npm_says_what_is_missing(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "fetch_asv_assets.py"),
                           "--cache", str(tmp_path / "cache")],
                          env=dict(os.environ, PATH=str(tmp_path / "no-bin")),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "npm not found" in proc.stderr
    for pkg in off.PACKAGES:
        assert f"{pkg.name}@{pkg.version}" in proc.stderr


# --- (b) the rewrite on hand-written HTML ---------------------------------------------------

def _sri(alg: str, data: bytes) -> str:
    return f"{alg}-" + base64.b64encode(hashlib.new(alg, data).digest()).decode()


SNIPPET = """<html><head>
<script type="text/javascript">
  function js_load_failure() {
    window.location = "error.html";
  }
</script>
<script src="https://code.jquery.com/jquery-3.3.1.min.js" integrity="{good}" crossorigin="anonymous" onerror="js_load_failure()"></script>
<script src="https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js" integrity="{bad}" crossorigin="anonymous" onerror="js_load_failure()"></script>
<link rel="stylesheet" href="https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css">
<!-- <script src="https://example.invalid/commented-out.js"></script> -->
<script src="local.js"></script>
</head><body><a href="https://github.com/airspeed-velocity/asv/" class="navbar-link">asv</a></body></html>
"""


def test_integrity_kept_when_bytes_match_and_dropped_otherwise(tmp_path):
    cache = fake_cache(tmp_path / "cache")
    jquery = (cache / "jquery-3.3.1" / "jquery.min.js").read_bytes()
    flot = (cache / "flot-0.8.3" / "jquery.flot.js").read_bytes()
    good = _sri("sha256", jquery)
    bad = _sri("sha512", flot + b"minified elsewhere")
    html = tmp_path / "html"
    html.mkdir()
    (html / "index.html").write_text(SNIPPET.replace("{good}", good).replace("{bad}", bad))
    reps = off.make_offline(html, cache)
    out = (html / "index.html").read_text()

    assert f'src="vendor/jquery-3.3.1/jquery.min.js" integrity="{good}"' in out
    assert bad not in out
    assert '<script src="vendor/flot-0.8.3/jquery.flot.js" crossorigin="anonymous"' in out
    assert "so the integrity attribute was dropped -->" in out
    assert 'href="vendor/bootstrap-3.1.1/css/bootstrap.min.css"' in out
    assert (html / "vendor" / "bootstrap-3.1.1" / "fonts" /
            "glyphicons-halflings-regular.woff").is_file()  # the css's ../fonts/ comes along
    assert out.count('onerror="js_load_failure(this)"') == 2
    assert 'window.location = "error.html"' not in out
    assert "swinkit-load-failure" in out
    assert '<a class="navbar-link" title="https://github.com/airspeed-velocity/asv/">' in out
    assert '<script src="local.js"></script>' in out
    assert "commented-out.js" in out  # comments are left alone
    assert off.remote_references(out) == []
    by_url = {r.url: r for r in reps}
    assert by_url["https://code.jquery.com/jquery-3.3.1.min.js"].integrity == "kept"
    assert by_url["https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/"
                  "jquery.flot.min.js"].integrity == "dropped"
    assert by_url["https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/"
                  "bootstrap.min.css"].integrity == "none"
    # idempotent: a second run finds nothing to do and changes nothing
    assert off.make_offline(html, cache) == []
    assert (html / "index.html").read_text() == out


def test_unknown_remote_address_fails_naming_it(tmp_path):
    html = tmp_path / "html"
    html.mkdir()
    page = '<script src="https://cdn.example.invalid/newlib-9.9.js"></script>\n'
    (html / "index.html").write_text(page)
    with pytest.raises(off.OfflineAssetsError, match="newlib-9.9.js: no local copy"):
        off.make_offline(html, fake_cache(tmp_path / "cache"))
    assert (html / "index.html").read_text() == page


def test_sri_matching():
    data = b"abc"
    assert off.sri_matches(_sri("sha256", data), data)
    assert off.sri_matches(_sri("sha384", data) + " sha256-AAAA", data)  # strongest one counts
    assert not off.sri_matches(_sri("sha512", b"abd"), data)
    assert not off.sri_matches(_sri("sha256", data) + " " + _sri("sha512", b"x"), data)
    assert not off.sri_matches("md5-xyz", data)


# --- the real cache (after tools/fetch_asv_assets.py) --------------------------------------

def _real_cache_or_skip() -> Path:
    cache = off.default_cache_dir()
    missing = [f"{p.name}@{p.version}" for p in off.PACKAGES if off.read_fetched(cache, p) is None]
    if missing:
        pytest.skip(f"asv page assets not fetched into {cache} (missing {', '.join(missing)}): "
                    "run python3 tools/fetch_asv_assets.py (needs npm)")
    return cache


def test_real_assets_keep_integrity_exactly_where_the_bytes_are_the_cdn_files(published,
                                                                              tmp_path):
    cache = _real_cache_or_skip()
    html = _copy(published, tmp_path / "html")
    reps = {r.url.rsplit("/", 1)[-1]: r for r in off.make_offline(html, cache) if r.local}
    kept = {name for name, r in reps.items() if r.integrity == "kept"}
    # the npm tarballs hold the very files these CDNs serve (checked against asv's hashes)
    assert {"jquery-3.3.1.min.js", "jquery.flot.orderBars.js", "md5.min.js", "bootstrap.min.js",
            "bootstrap.min.css"} <= kept
    # flot's minified builds are not in its npm package: its sources are used, hash dropped
    for name in ("jquery.flot.min.js", "jquery.flot.time.min.js"):
        assert reps[name].integrity == "dropped", reps[name]
    index = (html / "index.html").read_text()
    for r in reps.values():
        if r.integrity == "dropped":
            assert f"swinkit offline: {r.local} is" in index


# --- (c) a real browser, offline ------------------------------------------------------------

class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe (fds 3 and 4): stdlib only.

    Every address but 127.0.0.1 is unreachable: host names resolve to nothing and everything
    else goes to a proxy on a closed local port.
    """

    def __init__(self, exe: str, profile: Path, log: Path):
        closed_port = _free_port()
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        child_r = fcntl.fcntl(to_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_w = fcntl.fcntl(from_w, fcntl.F_DUPFD_CLOEXEC, 10)
        for fd in (to_r, from_w):
            os.close(fd)

        def on_child():  # the browser reads commands on fd 3, writes on fd 4
            os.dup2(child_r, 3)
            os.dup2(child_w, 4)

        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--remote-debugging-pipe", f"--user-data-dir={profile}", "--no-first-run",
                 "--no-default-browser-check", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-extensions",
                 "--window-size=1280,900",
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                 f"--proxy-server=http://127.0.0.1:{closed_port}",
                 "--proxy-bypass-list=127.0.0.1", "about:blank"]
        self._log = open(log, "wb")
        self.proc = subprocess.Popen([exe, *flags], stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, preexec_fn=on_child,
                                     close_fds=False, start_new_session=True)
        os.close(child_r)
        os.close(child_w)
        self._w, self._r = to_w, from_r
        self._next = 0
        self._replies: queue.Queue = queue.Queue()
        self.events: list[dict] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self._r, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self._replies.put(None)
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    self._replies.put(msg)
                else:
                    with self._lock:
                        self.events.append(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 60) -> dict:
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._replies.get(timeout=max(0.1, deadline - time.monotonic()))
            if reply is None:
                raise RuntimeError(f"chromium exited (code {self.proc.poll()}) during {method}")
            if reply["id"] == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def evaluate(self, session: str, expression: str):
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                        session)
        if "exceptionDetails" in res:
            raise RuntimeError(f"page JS failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def wait_for(self, session: str, expression: str, limit_s: float = 90):
        """Poll ``expression`` until it gives a truthy value (limit: only so a hang ends)."""
        deadline = time.monotonic() + limit_s
        while True:
            try:
                value = self.evaluate(session, expression)
            except RuntimeError:  # the page is navigating: its context went away, try again
                value = None
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.25)

    def close(self):
        try:
            os.write(self._w, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # our own session: the browser's children
            self.proc.wait(timeout=10)
        for fd in (self._w, self._r):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # the browser hung up: fine
            super().handle_error(request, client_address)


@pytest.fixture
def serve():
    """serve(folder) -> base URL of a static server on 127.0.0.1 (stopped after the test)."""
    servers = []

    def start(folder: Path) -> str:
        handler = functools.partial(_Quiet, directory=str(folder))
        server = _Server(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


# The flot canvas in the element with id %s: {width, height, painted pixels, points plotted}.
# Or {failed: message} as soon as the page says that a library failed to load.
CANVAS_JS = """(() => {
  const failure = document.getElementById('swinkit-load-failure');
  if (failure) return {failed: failure.textContent};
  const holder = document.getElementById(%s);
  const c = holder && holder.querySelector('canvas.flot-base');
  if (!c || !c.width || !c.height) return null;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let painted = 0;
  for (let i = 3; i < d.length; i += 4) if (d[i] > 0) painted++;
  const plot = window.jQuery && jQuery(holder).data('plot');
  const points = plot ? plot.getData().reduce((n, s) => n + s.data.filter(
      p => p && p[1] !== null).length, 0) : 0;
  return painted && points ? {width: c.width, height: c.height, painted, points} : null;
})()"""


def _load(browser: Chromium, url: str) -> tuple[str, int]:
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget", {"targetId": target,
                                                     "flatten": True})["sessionId"]
    for domain in ("Network", "Page", "Runtime", "Log"):
        browser.send(f"{domain}.enable", session=session)
    start = len(browser.events)
    browser.send("Page.navigate", {"url": url}, session)
    return session, start


def _requests(browser: Chromium, session: str, start: int) -> dict:
    """What the page asked for, what failed, what erred, since event index ``start``."""
    with browser._lock:
        events = [e for e in browser.events[start:] if e.get("sessionId") == session]
    urls = {e["params"]["requestId"]: e["params"]["request"]["url"]
            for e in events if e["method"] == "Network.requestWillBeSent"}
    failed = [(urls.get(e["params"]["requestId"]), e["params"]["errorText"])
              for e in events if e["method"] == "Network.loadingFailed"]
    bad_status = [(e["params"]["response"]["url"], e["params"]["response"]["status"])
                  for e in events if e["method"] == "Network.responseReceived"
                  and e["params"]["response"]["status"] >= 400]
    errors = [e["params"] for e in events if e["method"] == "Runtime.exceptionThrown"
              or (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
              or (e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] == "error")]
    return {"urls": sorted(set(urls.values())), "failed": failed, "bad_status": bad_status,
            "errors": errors}


def _screenshot(browser: Chromium, session: str, path: Path):
    data = browser.send("Page.captureScreenshot", {"format": "png"}, session)["data"]
    path.write_bytes(base64.b64decode(data))  # kept under pytest's tmp folder to look at


def test_chromium_renders_the_published_page_offline(published, tmp_path, serve):
    exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    cache = _real_cache_or_skip()
    raw = _copy(published, tmp_path / "as-published")
    html = _copy(published, tmp_path / "offline")
    off.make_offline(html, cache)

    browser = Chromium(exe, tmp_path / "profile", tmp_path / "chromium.log")
    try:
        # control: the page as asv published it cannot load its libraries here
        base = serve(raw)
        session, start = _load(browser, base + "index.html")
        went = browser.wait_for(session, "location.href.endsWith('/error.html') && "
                                         "location.href", limit_s=60)
        seen = _requests(browser, session, start)
        remote = [u for u in seen["urls"] if not u.startswith(base)]
        assert went == base + "error.html", f"asv's page did not fail as expected: {seen}"
        assert remote and {u for u, _ in seen["failed"]} & set(remote), \
            f"the harness let a CDN load through: {seen}"

        # the rewritten page: front page (the summary grid of small graphs)
        base = serve(html)
        session, start = _load(browser, base + "index.html")
        grid = browser.wait_for(session, CANVAS_JS % json.dumps(f"summarygrid-{BENCH}"))
        _screenshot(browser, session, tmp_path / "asv-offline-grid.png")
        where = browser.evaluate(session, "location.href")
        seen = _requests(browser, session, start)

        assert where.startswith(base + "index.html"), f"the page went to {where}"
        assert grid and "failed" not in grid, f"{grid}: {seen}"
        assert [u for u in seen["urls"] if not u.startswith(base)] == [], seen["urls"]
        assert seen["failed"] == [], seen["failed"]
        assert seen["bad_status"] == [], seen["bad_status"]
        assert seen["errors"] == [], seen["errors"]
        assert any("vendor/flot-0.8.3/jquery.flot.js" in u for u in seen["urls"])
        assert grid, "no graph was drawn in the benchmark grid " + str(seen)
        assert grid["points"] == 3, grid  # three commits

        # one benchmark's own graph page
        start = len(browser.events)
        browser.evaluate(session, f"location.hash = {json.dumps(BENCH)}; true")
        graph = browser.wait_for(session, CANVAS_JS % json.dumps("main-graph"))
        _screenshot(browser, session, tmp_path / "asv-offline-graph.png")
        seen = _requests(browser, session, start)
        assert graph and "failed" not in graph, f"the benchmark's graph was not drawn: {seen}"
        assert graph["points"] == 3 and graph["painted"] > 100, graph
        assert [u for u in seen["urls"] if not u.startswith(base)] == [], seen["urls"]
        assert seen["failed"] == [] and seen["bad_status"] == [] and seen["errors"] == [], seen

        # the benchmark list: a table sorted by stupidtable (sorting marks the column, and
        # writes the sort into the address)
        start = len(browser.events)
        browser.evaluate(session, "location.hash = 'summarylist'; true")
        sorted_by = browser.wait_for(session, """(() => {
          const th = document.querySelector('#summarylist-display table th.asc');
          const rows = document.querySelectorAll('#summarylist-display table tbody tr');
          return th && rows.length && location.hash.includes('sort=') ? th.textContent : null;
        })()""")
        seen = _requests(browser, session, start)
        assert sorted_by == "Benchmark", seen
        assert seen["failed"] == [] and seen["bad_status"] == [] and seen["errors"] == [], seen
    finally:
        browser.close()

"""The site in a real browser: built, served on 127.0.0.1 and driven through headless Chromium.

The test talks to Debian's ``chromium`` over the Chrome DevTools Protocol (one
websocket, ``websocket-client``; no driver binary, nothing downloaded). For the
home page, the Getting started page, every reference, an API page and an
example page it checks that:

- the page renders its H1/H2 headings (the same ones as its Markdown source);
- every code block is syntax-highlighted and carries a copy button;
- no console error, uncaught exception or failed load is reported;
- every internal link answers 200 and every ``#anchor`` names an element of its target page;
- a screenshot is saved to ``test-artifacts/site/`` (git-ignored) for a person to look at.

Search is driven like a user does (the query typed into the search box) and
must find "realTime" and "foreach" in the references; ``llms.txt`` and
``llms-full.txt`` are served and list every reference.

CI installs chromium (scripts/install_chromium.sh); where it is missing the
test skips and says so, except under CI, where it fails.
"""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import pytest

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts" / "site"
sys.path.insert(0, str(REPO / "scripts"))

from skillcheck.markdown import parse

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--window-size=1280,900"]

pytestmark = pytest.mark.slow


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def repo_facts_url() -> str:
    """The GitHub API URL Material fetches for the header's repository facts (from repo_url)."""
    repo = re.search(r"^repo_url:\s*https://github.com/(\S+?)/?$", (REPO / "mkdocs.yml").read_text(), re.M)
    return f"https://api.github.com/repos/{repo.group(1)}" if repo else "\0"


# --- fixtures: site, server, browser ------------------------------------------------------------

@pytest.fixture(scope="module")
def chromium():
    path = find_chromium()
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the browser test: chromium is missing (scripts/install_chromium.sh installs it)")
        pytest.skip("chromium not installed (Debian/Ubuntu: apt-get install chromium); CI installs it")
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def base_url(site):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class Browser:
    """A headless Chromium with one page, driven over the DevTools protocol."""

    def __init__(self, executable: str, profile: Path):
        import websocket  # websocket-client

        self.proc = subprocess.Popen([executable, *FLAGS, "--remote-debugging-port=0",
                                      f"--user-data-dir={profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start (exit {self.proc.poll()})")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []
        self.requests: dict[str, str] = {}
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")

    def _record(self, msg: dict) -> None:
        if msg.get("method") == "Network.requestWillBeSent":
            self.requests[msg["params"]["requestId"]] = msg["params"]["request"]["url"]
        self.events.append(msg)

    def send(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._record(msg)

    def wait_event(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        self.ws.settimeout(timeout)
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("method") == method:
                return msg
            self._record(msg)
        raise TimeoutError(method)

    def js(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_js(self, expression: str, timeout: float = 20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(expression)

    def open(self, url: str) -> None:
        self.events.clear()
        self.send("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")
        self.wait_js("document.readyState === 'complete'")

    def errors(self, origin: str) -> list[str]:
        """Console errors, exceptions and failed loads; also any request that leaves ``origin``, except
        Material's repository-facts call for ``repo_url`` (it fails offline and only fills the header)."""
        ignored = repo_facts_url()
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            url = p.get("entry", {}).get("url") or p.get("request", {}).get("url") \
                or p.get("response", {}).get("url") or self.requests.get(p.get("requestId"), "")
            if url.startswith(ignored):
                continue
            if m == "Network.requestWillBeSent" and not url.startswith((origin, "data:")):
                out.append(f"request leaves the site: {url}")
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif m == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(p["exceptionDetails"])[:500])
            elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
            elif m == "Network.loadingFailed" and not p.get("canceled"):
                out.append(f"load failed: {p.get('errorText')} {self.requests.get(p['requestId'], '?')}")
            elif m == "Network.responseReceived" and p["response"]["status"] >= 400:
                out.append(f"HTTP {p['response']['status']}: {p['response']['url']}")
        return out

    def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return data

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture(scope="module")
def browser(chromium, tmp_path_factory):
    b = Browser(chromium, tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


# --- the pages -----------------------------------------------------------------------------------

def pages() -> list[tuple[str, str]]:
    """(site path, Markdown source) of every page the test opens."""
    out = [("", "SKILL.md"), ("getting-started/", "docs/getting-started.md")]
    out += [(f"references/{p.stem}/", f"references/{p.name}") for p in sorted((REPO / "references").glob("*.md"))]
    out += [("api/sink/writer/", "docs/api/sink/writer.md"),
            ("examples/kafka_to_lakebase_upsert/", "examples/kafka_to_lakebase_upsert.py")]
    return out


def expected_headings(source: str) -> list[str]:
    if source.endswith(".py"):
        return [f"{source}"]
    doc = parse(source, (REPO / source).read_text(encoding="utf-8"))
    return [re.sub(r"[`*]", "", h.text).strip() for h in doc.headings if h.level <= 2]


def fenced_blocks(source: str) -> int:
    if source.endswith(".py"):
        return 1
    return len(parse(source, (REPO / source).read_text(encoding="utf-8")).blocks)


def slug(path: str) -> str:
    return path.strip("/").replace("/", "__") or "home"


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""


#: Material's copy button: ``.md-clipboard`` before 9.7, ``.md-code__button[data-md-type=copy]`` since.
COPY = "pre .md-code__button[data-md-type=copy], pre .md-clipboard"

PAGE_STATE = """(() => {
  const COPY = '__COPY__';
  const article = document.querySelector('article.md-content__inner');
  const heads = [...article.querySelectorAll('h1, h2')].map(h => h.textContent.replace('¶', '').trim());
  const blocks = [...article.querySelectorAll('div.highlight')];
  return {
    heads,
    blocks: blocks.length,
    // Pygments marks each block with its language; a text block has no tokens to colour.
    highlighted: blocks.filter(b => {
      const lang = (b.className.match(/language-(\\S+)/) || [])[1];
      return lang && (lang === 'text' || b.querySelector('code span[class]'));
    }).length,
    copy: blocks.filter(b => b.querySelector(COPY)).length,
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
  };
})()""".replace("__COPY__", COPY)


@pytest.mark.parametrize("path, source", pages(), ids=[slug(p) for p, _ in pages()])
def test_page_renders_in_the_browser(browser, base_url, path, source):
    url = urljoin(base_url, path)
    browser.open(url)
    # Material adds the copy buttons from JavaScript after load: wait for them when there are code blocks.
    if fenced_blocks(source):
        browser.wait_js(f"document.querySelectorAll('div.highlight {COPY.split(',')[0]}').length > 0")
    state = browser.js(PAGE_STATE)
    shot = browser.screenshot(ARTIFACTS / f"{slug(path)}.png")
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 10_000

    want = expected_headings(source)
    if source.endswith(".py"):
        assert state["heads"][:1] == want
    elif source == "docs/api/sink/writer.md":
        assert state["heads"][0] == want[0] and "PostgresForeachWriter" in " ".join(
            browser.js("[...document.querySelectorAll('article h2, article h3')].map(h => h.textContent)"))
        assert not re.search(r":(class|func|meth):", browser.js("document.querySelector('article').innerText"))
    else:
        assert state["heads"] == want
    assert state["blocks"] >= fenced_blocks(source), state
    assert state["highlighted"] == state["blocks"], f"unhighlighted code blocks: {state}"
    assert state["copy"] == state["blocks"], f"code blocks without a copy button: {state}"
    assert browser.errors(base_url) == []

    # Internal links answer, and their anchors exist on the target page.
    checked: dict[str, str] = {}
    for href in sorted(set(state["links"])):
        if urlparse(href).netloc != urlparse(base_url).netloc:
            continue
        target, fragment = urldefrag(href)
        if target not in checked:
            status, body = fetch(target)
            assert status == 200, f"{href} → HTTP {status} (on {path or 'home'})"
            checked[target] = body
        if fragment:
            assert re.search(rf'id="{re.escape(fragment)}"', checked[target]), f"{href}: no element #{fragment}"


def test_benchmarks_page_shows_every_chart(browser, base_url):
    """Each chart the benchmark scripts draw (benchmarks/results/*.png) is embedded exactly once and loads."""
    pngs = sorted(p.name for p in (REPO / "benchmarks" / "results").glob("*.png"))
    browser.open(urljoin(base_url, "benchmarks/"))
    images = browser.wait_js(
        "Promise.all([...document.querySelectorAll('article img')].map(i => i.decode().then(() => "
        "({src: i.src, w: i.naturalWidth}), () => ({src: i.src, w: 0})))).then(a => JSON.stringify(a))")
    images = json.loads(images)
    browser.screenshot(ARTIFACTS / "benchmarks.png")
    assert sorted(i["src"].rsplit("/", 1)[-1] for i in images if "/results/" in i["src"]) == pngs
    assert all(i["w"] > 100 for i in images), images
    assert browser.errors(base_url) == []


def test_search_finds_realtime_and_foreach(browser, base_url):
    for term, page in (("realTime", "references/real-time-mode/"), ("foreach", "references/lakebase-sink-python/")):
        browser.open(urljoin(base_url, "getting-started/"))
        browser.js("document.querySelector('label.md-search__icon, [for=__search]')?.click();"
                   "document.querySelector('input.md-search__input').focus()")
        browser.send("Input.insertText", text=term)
        browser.wait_js("document.querySelectorAll('.md-search-result__item').length > 0", timeout=30)
        hrefs = browser.js("[...document.querySelectorAll('.md-search-result__item a')].map(a => a.href)")
        meta = browser.js("document.querySelector('.md-search-result__meta').textContent")
        browser.screenshot(ARTIFACTS / f"search-{term}.png")
        assert any(page in h for h in hrefs), (term, meta, hrefs[:10])
        assert browser.errors(base_url) == []


def test_llms_txt_is_served_and_lists_every_reference(base_url):
    status, text = fetch(urljoin(base_url, "llms.txt"))
    assert status == 200 and text.startswith("# ")
    for ref in sorted((REPO / "references").glob("*.md")):
        assert f"references/{ref.stem}/" in text, ref.name
    site_url = re.search(r"^site_url:\s*(\S+)", (REPO / "mkdocs.yml").read_text(), re.M).group(1)
    links = re.findall(r"\]\((https?://[^)]+)\)", text)
    assert links and all(link.startswith(site_url) for link in links), links
    for link in links:
        assert fetch(urljoin(base_url, link[len(site_url):]))[0] == 200, link
    status, full = fetch(urljoin(base_url, "llms-full.txt"))
    assert status == 200
    assert 'trigger(realTime="5 seconds")' in full and "PostgresForeachWriter" in full

"""Open every page of the built documentation site in headless Chromium and check what a reader would see.

    python scripts/check_site.py [--site site] [--screenshots build/site-screenshots] [PAGE ...]

Every HTML page of the site is checked (or the PAGEs given, relative to the site), at 1280 px and at 390 px (a phone):

- no request of the page gets a 404 (its scripts, styles, images, MathJax's fonts and font data included);
- every image loads (``naturalWidth`` > 0);
- MathJax typesets every formula of a page that has some (no formula left as raw ``$...$`` or ``\\(...\\)``, no
  MathJax error) — the site's own copy of MathJax, served with the STIX-Web fonts it carries;
- at 390 px the page does not scroll sideways (wide tables and code scroll inside their own boxes);
- at 1280 px no table is cut off: a table wider than its box sits in a box that scrolls (``overflow-x: auto``) and
  shows it (the site's docs/assets/javascripts/dhp.js marks such a box ``dhp-scrolls``: a visible scrollbar, a
  shadow, a hint); a table cut by a box that hides its overflow, or wider than the window, fails;
- at 1280 px every figure's smallest label renders at 9 px or more: the label's size in the PNG's pixels (the
  ``dhp:min_font_px`` text chunk dhp.plots.save writes; without it the smallest font dhp/plots asks for, 6 pt, at
  the PNG's dpi) times the width the image is shown at over its natural width;
- the HTML holds no absolute path of the build machine (the project folder, the home folder, a temporary folder);
- the site's own search, typed into as a reader does (``?q=`` opens it), ranks each method's page first for the
  method's name (``SEARCHES``): Chromium runs with its DevTools port open, and the script reads the result list
  from the live page (search runs in a Web Worker, which ``--dump-dom``'s virtual time does not wait for).

The site is served on 127.0.0.1 (a free port) from a thread of this script, which records every 404 by the page being
checked. For each page a small probe page holds it in two same-origin iframes (1280 and 390 px wide); when both have
loaded and MathJax has finished, the probe writes what it found into its own DOM, which ``chromium --headless
--dump-dom`` prints. Screenshots of a few pages (home, course index, lessons 03, 07, 09, 11, leaderboard, reference)
are saved under build/site-screenshots/. Any problem fails the check (exit status 1), each printed on one line.
Chromium is Debian's ``chromium`` package (`make test` installs it when it is missing).
"""

from __future__ import annotations

import argparse
import functools
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: pages photographed at 1400 px (globs relative to the site; the first match of each)
SCREENSHOTS = ("index.html", "course/index.html", "course/03_*.html", "course/07_*.html", "course/09_*.html",
               "course/11_*.html", "leaderboard.html", "reference.html")
#: a method's name as a reader types it -> the page search must list first
SEARCHES = {"discernment": "methods/dhp.html", "criteria confusion": "methods/criteria_confusion.html",
            "bias": "methods/bias.html",
            "decompose": "methods/decompose_aggregate.html", "dual perspective": "methods/dual_perspective.html",
            "human alignment": "methods/human_alignment.html"}
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-dev-shm-usage",
         "--hide-scrollbars", "--virtual-time-budget=30000"]
PROBE = """<!doctype html><html><body><pre id="result">pending</pre>
<iframe id="wide" src="/{page}" style="width:1280px;height:1600px"></iframe>
<iframe id="narrow" src="/{page}" style="width:390px;height:800px"></iframe>
<script>
var found = {{}}, waiting = 2;
function probe(frame, key) {{
  var doc = frame.contentDocument, win = frame.contentWindow, tries = 0, queued = false, done = false;
  (function report() {{
    // MathJax typesets after the load event: wait (in Chromium's virtual time) until its queue has run
    var wants = !!doc.querySelector('script[src*="MathJax.js"]');
    if (wants && !done && tries++ < 200) {{
      if (win.MathJax && win.MathJax.Hub && win.MathJax.Hub.Queue && !queued) {{
        queued = true; win.MathJax.Hub.Queue(function () {{ done = true; }});
      }}
      setTimeout(report, 100); return;
    }}
    var imgs = Array.prototype.slice.call(doc.images);
    // text MathJax should have typeset but left as it was: $...$ or \\(...\\) outside code, scripts and math
    var raw = 0, walker = doc.createTreeWalker(doc.body, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {{
      var n = walker.currentNode, p = n.parentElement;
      if (p.closest("pre, code, script, style, textarea, .MathJax, .MathJax_Preview, .MathJax_Display")) continue;
      if (/\\$[^$\\s][^$]*\\$|\\\\\\(.+?\\\\\\)/.test(n.nodeValue)) raw++;
    }}
    // tables: one cut off (wider than a box that hides its overflow, or than the window with no box that scrolls),
    // or scrolling inside a box that shows no sign of it (the site's dhp.js marks such a box dhp-scrolls)
    var tables = [];
    Array.prototype.forEach.call(doc.querySelectorAll("table"), function (t) {{
      if (!t.offsetWidth || t.closest("details:not([open]), .MathJax, .MathJax_Display")) return;
      var tr = t.getBoundingClientRect(), label = (t.textContent || "").trim().replace(/\\s+/g, " ").slice(0, 60);
      for (var el = t; el && el !== doc.body && el !== doc.documentElement; el = el.parentElement) {{
        var cs = win.getComputedStyle(el), ox = cs.overflowX;
        if (cs.display === "table") continue;  // a table box does not clip or scroll, whatever its overflow says
        // a box that scrolls but holds the table whole is no answer: the box itself may be cut further up
        if ((ox === "auto" || ox === "scroll") && el.scrollWidth > el.clientWidth + 1) {{
          if (!el.classList.contains("dhp-scrolls"))
            tables.push({{kind: "hidden_scroll", px: el.scrollWidth - el.clientWidth, text: label}});
          return;
        }}
        if (ox === "auto" || ox === "scroll") tr = el.getBoundingClientRect();
        if (ox === "hidden" || ox === "clip") {{
          var r = el.getBoundingClientRect();
          if (tr.right > r.right + 1 || tr.left < r.left - 1)
            tables.push({{kind: "clipped", px: Math.round(Math.max(tr.right - r.right, r.left - tr.left)), text: label}});
          return;
        }}
      }}
      if (tr.right > win.innerWidth + 1) tables.push({{kind: "clipped", px: Math.round(tr.right - win.innerWidth), text: label}});
    }});
    found[key] = {{title: doc.title, tables: tables, mathjax: wants ? (win.MathJax && win.MathJax.version) || null : "not used",
      typeset_done: done, formulas: doc.querySelectorAll(".MathJax, .MathJax_Display, .MathJax_SVG").length,
      errors: doc.querySelectorAll(".MathJax_Error, merror, .mjx-merror").length, raw_math: raw,
      scroll_width: doc.documentElement.scrollWidth, width: win.innerWidth,
      images: imgs.map(function (i) {{ return {{src: (i.getAttribute("src") || "").slice(0, 120),
                                                width: i.naturalWidth, shown: i.getBoundingClientRect().width}}; }})}};
    if (--waiting === 0) document.getElementById("result").textContent = JSON.stringify(found);
  }})();
}}
["wide", "narrow"].forEach(function (key) {{
  document.getElementById(key).addEventListener("load", function () {{ probe(this, key); }});
}});
</script></body></html>"""


#: The smallest label a figure may show on a page at 1280 px, in CSS pixels.
MIN_LABEL_PX = 9.0
#: The PNG text chunk where dhp.plots.save writes a figure's smallest font in the PNG's own pixels (points x dpi / 72).
MIN_FONT_KEY = "dhp:min_font_px"
#: Without that chunk, the smallest font size any dhp/plots module asks for (decomposition's bar labels: 6 pt), at the
#: PNG's dpi (its pHYs chunk, else dhp.plots.save.DPI = 150): a figure could hold a label that small.
FALLBACK_FONT_PT, FALLBACK_DPI = 6.0, 150.0


def png_font_px(data: bytes) -> tuple[float, int] | None:
    """(smallest font in the PNG's pixels, PNG width) of a PNG's bytes; None when they are no PNG. The font is the
    ``dhp:min_font_px`` text chunk, else FALLBACK_FONT_PT at the PNG's dpi."""
    import struct
    import zlib

    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return None
    pos, width, dpi, font = 8, 0, FALLBACK_DPI, None
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width = struct.unpack(">I", body[:4])[0]
        elif kind == b"pHYs" and body[8:9] == b"\x01":  # pixels per metre
            dpi = round(struct.unpack(">I", body[:4])[0] * 0.0254)  # stored as whole pixels per metre
        elif kind in (b"tEXt", b"zTXt", b"iTXt"):
            key, _, value = body.partition(b"\x00")
            if key.decode("latin-1") == MIN_FONT_KEY:
                if kind == b"zTXt":
                    value = zlib.decompress(value[1:])
                elif kind == b"iTXt":
                    value = value[2:].split(b"\x00", 2)[-1]
                try:
                    font = float(value.decode("utf-8"))
                except ValueError:
                    pass
        elif kind == b"IEND":
            break
        pos += 12 + length
    if font is None or font != font:  # no chunk, or NaN (a figure without text): assume the smallest font
        font = FALLBACK_FONT_PT * dpi / 72
    return font, width


def _image_bytes(src: str, page: str, site: Path) -> bytes | None:
    import base64
    import urllib.parse

    if src.startswith("data:image/png;base64,"):
        return base64.b64decode(src.split(",", 1)[1])
    if re.match(r"^[a-z]+:", src) or not src:
        return None
    path = (site / page).parent / urllib.parse.unquote(src.split("#")[0].split("?")[0])
    return path.read_bytes() if path.is_file() else None


def small_figures(page: str, text: str, site: Path, images: list[dict], width: int) -> list[str]:
    """Figures whose smallest label renders under MIN_LABEL_PX: its font in the PNG's pixels x shown width / PNG
    width. ``images`` are the browser's (document order, with naturalWidth and shown width); the page's <img> tags
    are matched to them by order (and their PNG width checked against naturalWidth)."""
    srcs = re.findall(r"<img\b[^>]*?\ssrc=[\"']([^\"']+)[\"']", text)
    out = []
    if len(srcs) != len(images):
        return out  # an image added by a script: the order is not known
    for src, img in zip(srcs, images):
        if not img["shown"] or not img["width"]:
            continue
        data = _image_bytes(html.unescape(src), page, site)
        got = png_font_px(data) if data else None
        if not got or got[1] != img["width"]:
            continue
        label = got[0] * img["shown"] / got[1]
        if label < MIN_LABEL_PX - 1e-6:
            name = src if not src.startswith("data:") else "an inline figure"
            out.append(f"{page}: {name[:80]} is shown at {img['shown']:.0f} of its {got[1]} px at {width} px: its "
                       f"smallest label renders at {label:.1f} px (under {MIN_LABEL_PX:g})")
    return out


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    raise SystemExit("error: no chromium found. Fix: apt-get update && apt-get install -y chromium "
                     "(make test does this when it runs as root)")


def serve(site: Path, missing: list[str]) -> tuple[http.server.ThreadingHTTPServer, int]:
    """A server of ``site`` on a free port; every path it answers 404 is appended to ``missing``."""
    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path.startswith("/__probe__/"):
                body = PROBE.format(page=html.escape(self.path[len("/__probe__/"):])).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

        def send_error(self, code, message=None, explain=None):
            if code == 404 and not self.path.endswith("/favicon.ico"):  # the browser asks for it on its own
                missing.append(self.path.split("?")[0])
            super().send_error(code, message, explain)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def build_paths() -> list[str]:
    """Absolute paths of the build machine that no page may show (the project folder, home, temporary folders)."""
    out = [str(ROOT)]
    data = os.environ.get("DHP_DATA_DIR", "").rstrip("/")
    if data.startswith("/") and len(data) > 1:
        out.append(data)
    home = str(Path.home())
    if home not in ("/", ""):
        out.append(home + "/")
    tmp = tempfile.gettempdir().rstrip("/")
    out += [tmp + "/tmp", tmp + "/dhp-"]  # the names Python's tempfile and the notebook check give their folders
    return out


def absolute_paths(text: str, forbidden=None) -> list[str]:
    """The build machine's absolute paths found in a page's HTML (each once)."""
    return [p for p in (forbidden or build_paths()) if p in text]


def check(site: Path, pages, formula_pages=(), forbidden=None) -> list[str]:
    """Problems found on ``pages`` (paths relative to ``site``); empty when every page passed. ``formula_pages``
    must have at least one formula typeset (a page whose MathJax did not load has none)."""
    browser, problems, missing = chromium(), [], []
    server, port = serve(site, missing)
    try:
        with tempfile.TemporaryDirectory(prefix="dhp-chromium-") as profile:
            flags = [*FLAGS, f"--user-data-dir={profile}"]
            for page in pages:
                path = site / page
                if not path.is_file():
                    problems.append(f"{page}: not in the built site")
                    continue
                problems += [f"{page}: shows the build machine's path {p}"
                             for p in absolute_paths(path.read_text(encoding="utf-8", errors="replace"), forbidden)]
                before = len(missing)
                for _ in range(3):  # a machine under heavy load can leave a load unfinished: asked again, twice
                    out = subprocess.run([browser, *flags, "--dump-dom", f"http://127.0.0.1:{port}/__probe__/{page}"],
                                         capture_output=True, text=True, timeout=180)
                    m = re.search(r'<pre id="result">(.*?)</pre>', out.stdout, re.S)
                    if m and m.group(1) != "pending":
                        break
                problems += [f"{page}: {p} is missing (404)" for p in dict.fromkeys(missing[before:])]
                if not m or m.group(1) == "pending":
                    problems.append(f"{page}: the page did not finish loading ({out.stderr.strip()[-300:]})")
                    continue
                found = json.loads(html.unescape(m.group(1)))
                wide, narrow = found["wide"], found["narrow"]
                images = wide["images"]
                broken = [i["src"] for i in images if not i["width"]]
                print(f"{page}: {wide['title']!r}: {len(images)} images, {len(images) - len(broken)} loaded; "
                      f"MathJax {wide['mathjax']}, {wide['formulas']} formulas typeset; "
                      f"{narrow['scroll_width']} px wide at {narrow['width']} px")
                problems += [f"{page}: image {src} did not load" for src in broken]
                for t in wide["tables"]:
                    problems.append(f"{page}: a table is cut off by {t['px']} px at {wide['width']} px (no box that "
                                    f"scrolls): {t['text']!r}" if t["kind"] == "clipped" else
                                    f"{page}: a table scrolls {t['px']} px sideways at {wide['width']} px with no "
                                    f"visible sign (no dhp-scrolls mark): {t['text']!r}")
                problems += small_figures(page, path.read_text(encoding="utf-8", errors="replace"), site, images,
                                          wide["width"])
                if page in formula_pages and not wide["formulas"]:
                    problems.append(f"{page}: no formula was typeset (MathJax {wide['mathjax']}: is "
                                    "site/assets/mathjax/ there? docs/hooks.py copies it)")
                if wide["mathjax"] != "not used" and not wide["typeset_done"]:
                    problems.append(f"{page}: MathJax did not finish typesetting (MathJax {wide['mathjax']})")
                if wide["raw_math"]:
                    problems.append(f"{page}: {wide['raw_math']} text(s) with formulas MathJax did not typeset")
                if wide["errors"]:
                    problems.append(f"{page}: {wide['errors']} formula(s) with a MathJax error")
                if narrow["scroll_width"] > narrow["width"] + 1:
                    problems.append(f"{page}: scrolls sideways at {narrow['width']} px (the page is "
                                    f"{narrow['scroll_width']} px wide)")
    finally:
        server.shutdown()
    return problems


def search_results(site: Path, queries, timeout: float = 60.0) -> dict[str, list[str]]:
    """What the site's search lists for each query (its result links, best first), read from a live page in
    headless Chromium driven over its DevTools protocol; [] where nothing was listed within ``timeout`` seconds."""
    import urllib.request

    import websocket  # websocket-client (a test dependency)

    missing: list[str] = []
    server, port = serve(site, missing)
    profile = tempfile.mkdtemp(prefix="dhp-search-")
    flags = [f for f in FLAGS if not f.startswith("--virtual-time")]  # real time: the worker must get to run
    proc = subprocess.Popen([chromium(), *flags, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out: dict[str, list[str]] = {}
    try:
        active = Path(profile) / "DevToolsActivePort"
        end = time.monotonic() + timeout
        while not active.is_file() or not active.read_text().strip():
            if time.monotonic() > end or proc.poll() is not None:
                raise RuntimeError("Chromium did not open its DevTools port")
            time.sleep(0.1)
        dev = active.read_text().split()[0]
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{dev}/json", timeout=30))
        url = next(t for t in targets if t.get("type") == "page")["webSocketDebuggerUrl"]
        ws = websocket.create_connection(url, timeout=timeout, suppress_origin=True)
        counter = iter(range(1, 1 << 30))

        def call(method: str, **params):
            n = next(counter)
            ws.send(json.dumps({"id": n, "method": method, "params": params}))
            while True:
                msg = json.loads(ws.recv())
                if msg.get("id") == n:
                    return msg.get("result", {})

        links = ("JSON.stringify(Array.from(document.querySelectorAll('.md-search-result__item > a'))"
                 ".map(function (a) { return a.getAttribute('href'); }))")
        for q in queries:
            call("Page.navigate", url=f"http://127.0.0.1:{port}/index.html?q={urllib.parse.quote(q)}")
            hrefs: list[str] = []
            end = time.monotonic() + timeout
            while not hrefs and time.monotonic() < end:
                time.sleep(0.2)
                value = call("Runtime.evaluate", expression=links, returnByValue=True).get("result", {}).get("value")
                hrefs = json.loads(value or "[]")
            out[q] = [re.sub(r"^https?://[^/]+/", "", h).lstrip("./") for h in hrefs]
        ws.close()
    finally:
        proc.kill()
        proc.wait()
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)
    return out


def search_problems(results: dict[str, list[str]], expected=SEARCHES) -> list[str]:
    """A method's page not listed first for its name."""
    problems = []
    for q, page in expected.items():
        got = results.get(q) or []
        if not got or got[0].split("#")[0] != page:
            problems.append(f"search for '{q}' lists {got[0] if got else 'nothing'} first, not {page} "
                            f"(the first three: {got[:3]})")
    return problems


def screenshots(site: Path, out: Path, patterns=SCREENSHOTS, width: int = 1400) -> list[Path]:
    """PNG screenshots (``width`` px wide) of the first page matching each pattern, written to ``out``."""
    browser, saved = chromium(), []
    out.mkdir(parents=True, exist_ok=True)
    server, port = serve(site, [])
    try:
        with tempfile.TemporaryDirectory(prefix="dhp-chromium-") as profile:
            for pattern in patterns:
                page = next(iter(sorted(site.glob(pattern))), None)
                if page is None:
                    continue
                rel = page.relative_to(site).as_posix()
                dest = out / (rel.replace("/", "_").removesuffix(".html") + ".png")
                subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},2200",
                                f"--screenshot={dest}", f"http://127.0.0.1:{port}/{rel}"],
                               capture_output=True, timeout=180)
                if dest.is_file():
                    saved.append(dest)
    finally:
        server.shutdown()
    return saved


def all_pages(site: Path) -> list[str]:
    """Every HTML page of the site (its 404 page aside), relative to it."""
    return sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                  if p.name != "404.html" and "assets" not in p.relative_to(site).parts)


def formula_pages(site: Path, pages) -> list[str]:
    """The pages whose HTML holds formulas: Markdown pages' arithmatex spans, notebooks' $...$ in Markdown cells."""
    out = []
    for page in pages:
        text = (site / page).read_text(encoding="utf-8", errors="replace")
        prose = re.sub(r"<(style|script|pre|code)\b.*?</\1>", "", text, flags=re.S)  # code, styles, scripts aside
        if 'class="arithmatex"' in text or (page.startswith("course/") and "MathJax.js" in text
                                            and re.search(r"\$[^$\s<][^$<]*\$", prose)):
            out.append(page)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pages", nargs="*", help="pages to check (default: every page of the site)")
    ap.add_argument("--site", default=str(ROOT / "site"))
    ap.add_argument("--screenshots", default=str(ROOT / "build" / "site-screenshots"),
                    help="folder for the screenshots ('' for none)")
    args = ap.parse_args(argv)
    site = Path(args.site)
    if not (site / "index.html").is_file():
        print(f"error: no built site in {site}. Fix: run `make docs` first.", file=sys.stderr)
        return 2
    pages = list(args.pages) or all_pages(site)
    problems = check(site, pages, formula_pages=formula_pages(site, [p for p in pages if (site / p).is_file()]))
    if not args.pages:  # the whole site: its search too
        found = search_results(site, SEARCHES)
        problems += search_problems(found)
        print(f"search: {sum(1 for q in SEARCHES if (found.get(q) or [''])[0].split('#')[0] == SEARCHES[q])} of "
              f"{len(SEARCHES)} method names list their method's page first")
    if args.screenshots:
        saved = screenshots(site, Path(args.screenshots))
        print(f"{len(saved)} screenshots in {args.screenshots}")
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    print(f"{len(pages)} pages checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Open every page of the built documentation site in headless Chromium and check what a reader would see.

    python scripts/check_site.py [--site site] [--screenshots build/site-screenshots] [PAGE ...]

Every HTML page of the site is checked (or the PAGEs given, relative to the site), at 1280 px and at 390 px (a phone):

- no request of the page gets a 404 (its scripts, styles, images, MathJax's fonts and font data included);
- every image loads (``naturalWidth`` > 0);
- MathJax typesets every formula of a page that has some (no formula left as raw ``$...$`` or ``\\(...\\)``, no
  MathJax error) — the site's own copy of MathJax, served with the STIX-Web fonts it carries;
- at 390 px the page does not scroll sideways (wide tables and code scroll inside their own boxes);
- the HTML holds no absolute path of the build machine (the project folder, the home folder, a temporary folder).

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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: pages photographed at 1400 px (globs relative to the site; the first match of each)
SCREENSHOTS = ("index.html", "course/index.html", "course/03_*.html", "course/07_*.html", "course/09_*.html",
               "course/11_*.html", "leaderboard.html", "reference.html")
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
    found[key] = {{title: doc.title, mathjax: wants ? (win.MathJax && win.MathJax.version) || null : "not used",
      typeset_done: done, formulas: doc.querySelectorAll(".MathJax, .MathJax_Display, .MathJax_SVG").length,
      errors: doc.querySelectorAll(".MathJax_Error, merror, .mjx-merror").length, raw_math: raw,
      scroll_width: doc.documentElement.scrollWidth, width: win.innerWidth,
      images: imgs.map(function (i) {{ return {{src: (i.getAttribute("src") || "").slice(0, 120),
                                                width: i.naturalWidth}}; }})}};
    if (--waiting === 0) document.getElementById("result").textContent = JSON.stringify(found);
  }})();
}}
["wide", "narrow"].forEach(function (key) {{
  document.getElementById(key).addEventListener("load", function () {{ probe(this, key); }});
}});
</script></body></html>"""


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
                out = subprocess.run([browser, *flags, "--dump-dom", f"http://127.0.0.1:{port}/__probe__/{page}"],
                                     capture_output=True, text=True, timeout=180)
                m = re.search(r'<pre id="result">(.*?)</pre>', out.stdout, re.S)
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
    if args.screenshots:
        saved = screenshots(site, Path(args.screenshots))
        print(f"{len(saved)} screenshots in {args.screenshots}")
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    print(f"{len(pages)} pages checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

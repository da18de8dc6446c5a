"""Open built pages of the documentation site in headless Chromium and check that their figures load.

    python scripts/check_site.py [--site site] [--screenshot out.png] [PAGE ...]

By default it checks the front page, the leaderboard, the DHP page and the executed notebook page with the
most figures (when the site has the course's notebook pages). The site is served on 127.0.0.1 (a free port) from a thread of this script. For each page a small probe page is
served beside it that holds the page in a same-origin iframe; when the iframe has loaded, the probe writes every
image's URL and ``naturalWidth`` (0: the image did not load) into its own DOM, which ``chromium --headless
--dump-dom`` prints. A page with no image, or with one that did not load, fails the check (exit status 1).
Chromium is Debian's ``chromium`` package (`make test` installs it when it is missing).
"""

from __future__ import annotations

import argparse
import functools
import html
import http.server
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: three pages with figures: the front page, the leaderboard and a method page
PAGES = ("index.html", "leaderboard.html", "methods/dhp.html")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-dev-shm-usage",
         "--virtual-time-budget=15000"]
PROBE = """<!doctype html><html><body><pre id="result">pending</pre>
<iframe id="page" src="/{page}" style="width:1280px;height:2000px"></iframe>
<script>
document.getElementById("page").addEventListener("load", function () {{
  var frame = this, tries = 0;
  // MathJax typesets after the load event (and marks its config script ";executed=true"): wait, in Chromium's
  // virtual time, until it has, or give up after 10 s
  (function report() {{
    var doc = frame.contentDocument, win = frame.contentWindow, imgs = Array.prototype.slice.call(doc.images);
    var wants = !!doc.querySelector('script[type^="text/x-mathjax-config"]');
    var math = doc.querySelectorAll(".MathJax, .MathJax_Display, .MathJax_SVG").length;
    if (wants && math === 0 && tries++ < 100) {{ setTimeout(report, 100); return; }}
    document.getElementById("result").textContent = JSON.stringify({{title: doc.title,
      mathjax: wants ? (win.MathJax && win.MathJax.version) || null : "not used", formulas: math,
      images: imgs.map(function (i) {{ return {{src: i.getAttribute("src").slice(0, 120), width: i.naturalWidth,
                                                 complete: i.complete}}; }})}});
  }})();
}});
</script></body></html>"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    raise SystemExit("error: no chromium found. Fix: apt-get update && apt-get install -y chromium "
                     "(make test does this when it runs as root)")


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, int]:
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

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def check(site: Path, pages, screenshot: Path | None = None, formula_pages=()) -> list[str]:
    """Problems found (empty when every page's figures loaded and every page of ``formula_pages`` has formulas
    typeset by MathJax)."""
    browser, problems = chromium(), []
    server, port = serve(site)
    try:
        with tempfile.TemporaryDirectory(prefix="dhp-chromium-") as profile:
            flags = [*FLAGS, f"--user-data-dir={profile}"]
            for page in pages:
                if not (site / page).is_file():
                    problems.append(f"{page}: not in the built site")
                    continue
                out = subprocess.run([browser, *flags, "--dump-dom", f"http://127.0.0.1:{port}/__probe__/{page}"],
                                     capture_output=True, text=True, timeout=120)
                m = re.search(r'<pre id="result">(.*?)</pre>', out.stdout, re.S)
                if not m or m.group(1) == "pending":
                    problems.append(f"{page}: the page did not finish loading ({out.stderr.strip()[-300:]})")
                    continue
                found = json.loads(html.unescape(m.group(1)))
                images = found["images"]
                broken = [i["src"] for i in images if not i["width"]]
                print(f"{page}: {found['title']!r}: {len(images)} images, {len(images) - len(broken)} loaded; "
                      f"MathJax {found['mathjax']}, {found['formulas']} formulas typeset")
                if page in formula_pages and not found["formulas"]:
                    problems.append(f"{page}: no formula was typeset (MathJax {found['mathjax']}: is "
                                    "site/assets/mathjax/ there? docs/hooks.py copies it)")
                if images == [] and page not in formula_pages:
                    problems.append(f"{page}: no image on the page")
                problems += [f"{page}: image {src} did not load" for src in broken]
            if screenshot is not None:
                subprocess.run([browser, *flags, "--window-size=1280,1600", f"--screenshot={screenshot}",
                                f"http://127.0.0.1:{port}/{pages[0]}"], capture_output=True, timeout=120)
    finally:
        server.shutdown()
    return problems


def course_page(site: Path) -> str | None:
    """The executed notebook page with the most images (None when the site has no notebook pages)."""
    pages = [p for p in (site / "course").glob("[0-9][0-9]_*.html")] if (site / "course").is_dir() else []
    if not pages:
        return None
    best = max(pages, key=lambda p: (p.read_text(encoding="utf-8", errors="replace").count("<img"), p.name))
    return best.relative_to(site).as_posix()


def formula_page(site: Path) -> str | None:
    """The executed notebook page with the most inline formulas ($...$ in its Markdown), or None."""
    pages = sorted((site / "course").glob("[0-9][0-9]_*.html")) if (site / "course").is_dir() else []
    counts = {p: len(re.findall(r"\$[^$\s][^$]*\$", p.read_text(encoding="utf-8", errors="replace")))
              for p in pages}
    best = max(counts, key=lambda p: (counts[p], p.name), default=None)
    return best.relative_to(site).as_posix() if best is not None and counts[best] else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pages", nargs="*", default=list(PAGES))
    ap.add_argument("--site", default=str(ROOT / "site"))
    ap.add_argument("--screenshot", default=None, help="also save a screenshot of the first page here")
    ap.add_argument("--no-course", action="store_true", help="do not add the course page with the most figures")
    args = ap.parse_args(argv)
    site = Path(args.site)
    if not (site / "index.html").is_file():
        print(f"error: no built site in {site}. Fix: run `make docs` first.", file=sys.stderr)
        return 2
    pages = list(args.pages)
    course = course_page(site)
    if course and not args.no_course and course not in pages:
        pages.append(course)  # the executed notebooks' figures are inline images: check one such page too
    formulas = formula_page(site) if not args.no_course else None
    if formulas and formulas not in pages:
        pages.append(formulas)  # the course's formulas: MathJax from the site itself must typeset them
    problems = check(site, pages, Path(args.screenshot).resolve() if args.screenshot else None,
                     formula_pages=[formulas] if formulas else [])
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

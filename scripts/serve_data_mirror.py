"""Serve a complete data root on loopback under the upstream URL layout (``/<owner>/<repo>/<commit>/<path>``), so a
fresh clone can be tried as a user with internet would run it: ``DHP_DATA_MIRROR=http://127.0.0.1:PORT make demo``.

    python scripts/serve_data_mirror.py DATA_ROOT [--port 8765]   (--port 0: a free port; the first line printed
                                                                  names the URL)

Only the files declared in dhp/resources/data_registry.json are served; each request is logged with its byte count,
so a run's fetches can be counted (every declared file once, none on a second run).
"""

from __future__ import annotations

import argparse
import http.server
import sys
import urllib.parse
from pathlib import Path

from dhp.datasets import declared_files


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="a data root holding the declared files")
    ap.add_argument("--port", type=int, default=8765, help="0: any free port (default 8765)")
    a = ap.parse_args(argv)
    files = {f"/{f.repository}/{f.commit}/{f.upstream_path}": a.root / f.rel for f in declared_files.files().values()
             if f.repository and (a.root / f.rel).is_file()}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            local = files.get(urllib.parse.unquote(self.path))
            if local is None:
                self.send_error(404)
                return
            data = local.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, fmt, *args):
            sys.stderr.write(f"GET {self.path} {args[1] if len(args) > 1 else ''}\n")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    print(f"serving {len(files)} files of {a.root} on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A loopback OpenAI-compatible server that answers every chat completion at once with a number (0-100, from a hash of
the request: deterministic, so two runs see the same judge), for measuring the workbench's own cost around the calls:

    python benchmarks/instant_server.py --port 8999 &
    python -m dhp evaluate openai:stub@http://127.0.0.1:8999/v1 --protocol gemba:DA_ref --profile quick --yes
"""

from __future__ import annotations

import argparse
import hashlib
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        text = str(int(hashlib.sha256(raw).hexdigest(), 16) % 101)
        self._send({"id": "x", "object": "chat.completion", "model": "stub", "created": 0,
                    "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 2, "total_tokens": 102}})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, default=8999)
    args = ap.parse_args(argv)
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()

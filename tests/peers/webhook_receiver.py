"""A webhook receiver on loopback that Herald's integration tests point endpoints at. Every
request it gets is verified with the official Standard Webhooks library (`standardwebhooks`),
not with Herald's own code.

Usage: python webhook_receiver.py --dir DIR [--host 127.0.0.1] [--port 0]

It binds (port 0 picks a free port), prints exactly `READY <port>` on stdout and flushes. An
endpoint is a path `/e/<label>`. Each request is recorded as one JSON line in DIR/received.jsonl,
written before the answer is sent:

  {"label", "webhook_id", "webhook_timestamp", "signature", "body", "answered", "at_ms",
   "verified": [true|false for each secret of the label, in order], "errors": [...]}

DIR/secrets.json maps a label to its list of secrets (`whsec_...`); every one of them must
verify the request (after a rotation, both the new and the old). DIR/rules.json maps a label to
a list of answers, the n-th request of the label getting the n-th answer and the last one
repeating (none: 204):

  "ok"            204
  "<status>"      that status, e.g. "500", "410"
  "<status>/<s>"  that status with `Retry-After: <s>`
  "slow:<ms>"     wait <ms>, then 204

Both files are re-read at every request, so a test can change them while the server runs.
SIGTERM and SIGINT stop the server and exit 0.
"""

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

LOCK = threading.Lock()
COUNTS = {}


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # quiet
        pass

    def do_POST(self):
        directory = self.server.directory
        length = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(length)
        label = self.path[len("/e/"):] if self.path.startswith("/e/") else ""
        headers = {
            "webhook-id": self.headers.get("webhook-id", ""),
            "webhook-timestamp": self.headers.get("webhook-timestamp", ""),
            "webhook-signature": self.headers.get("webhook-signature", ""),
        }
        secrets = read_json(os.path.join(directory, "secrets.json")).get(label, [])
        verified, errors = [], []
        for secret in secrets:
            try:
                Webhook(secret).verify(raw, headers)
                verified.append(True)
            except WebhookVerificationError as e:
                verified.append(False)
                errors.append(str(e))
        rules = read_json(os.path.join(directory, "rules.json")).get(label, [])
        with LOCK:
            n = COUNTS.get(label, 0)
            COUNTS[label] = n + 1
        rule = rules[min(n, len(rules) - 1)] if rules else "ok"
        status, retry_after = 204, None
        if rule.startswith("slow:"):
            time.sleep(int(rule[len("slow:"):]) / 1000)
        elif rule != "ok":
            code, _, seconds = rule.partition("/")
            status = int(code)
            retry_after = seconds or None
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        line = {
            "label": label,
            "webhook_id": headers["webhook-id"],
            "webhook_timestamp": headers["webhook-timestamp"],
            "signature": headers["webhook-signature"],
            "content_type": self.headers.get("content-type", ""),
            "body": body,
            "answered": status,
            "at_ms": int(time.time() * 1000),
            "verified": verified,
            "errors": errors,
        }
        with LOCK:
            with open(os.path.join(directory, "received.jsonl"), "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
        self.send_response(status)
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        self.send_header("Content-Length", "0")
        self.end_headers()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.directory = args.dir
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    print(f"READY {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

"""An SSE client nobody in this project wrote (httpx + httpx-sse), for Herald's stream tests.

Usage: sse_client.py URL TOKEN [--last-event-id ID]

Prints one JSON line per event ({"event", "id", "data"}) as it arrives, flushed. If the server
answers without a stream, prints {"status": N, "body": ...} and exits 1. Ends when the stream
ends or on SIGTERM.
"""

import argparse
import json
import signal
import sys

import httpx
from httpx_sse import connect_sse


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("--last-event-id")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    headers = {"Authorization": f"Bearer {args.token}", "Accept": "text/event-stream"}
    if args.last_event_id is not None:
        headers["Last-Event-ID"] = args.last_event_id
    with httpx.Client(timeout=httpx.Timeout(10.0, read=None)) as client:
        with connect_sse(client, "GET", args.url, headers=headers) as source:
            if source.response.status_code != 200:
                source.response.read()
                print(json.dumps({"status": source.response.status_code, "body": source.response.text}), flush=True)
                return 1
            for sse in source.iter_sse():
                try:
                    data = json.loads(sse.data) if sse.data else None
                except json.JSONDecodeError:
                    data = sse.data
                print(json.dumps({"event": sse.event, "id": sse.id or None, "data": data}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Signs requests as Twilio does, with Twilio's own helper library (PyPI `twilio`), so that the
integration tests check Herald's X-Twilio-Signature verification against code nobody here wrote.

Usage: python twilio_sign.py

One JSON object per line on stdin: {"token": AUTH_TOKEN, "url": URL, "params": [[NAME, VALUE], ...]};
for each, one line on stdout: RequestValidator(token).compute_signature(url, params). The params
go to the library as an object with `getall` (as Flask's MultiDict), so a name may repeat. It prints
`READY` once the library is imported, and exits at the end of stdin.
"""

import json
import sys

from twilio.request_validator import RequestValidator


class Params:
    """Form fields in order, repeats allowed, shaped as the library reads a MultiDict."""

    def __init__(self, pairs):
        self.pairs = [(name, value) for name, value in pairs]

    def __iter__(self):
        return iter([name for name, _ in self.pairs])

    def __len__(self):
        return len(self.pairs)

    def getall(self, name):
        return [value for key, value in self.pairs if key == name]


def main():
    print("READY", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        validator = RequestValidator(request["token"])
        print(validator.compute_signature(request["url"], Params(request["params"])), flush=True)


if __name__ == "__main__":
    main()

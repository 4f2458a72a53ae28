"""Checks the DKIM signature of a message with dkimpy, an implementation nobody here wrote,
fetching the signing domain's public key from the DNS server the test runs (dnspython).

Usage: python dkim_verify.py MESSAGE_FILE NAMESERVER_IP PORT

Prints one JSON object: {"verified": bool, "domain": d=, "selector": s=, "headers": h=, "log": [...]}
and exits 0 whether or not the signature verifies (the test asserts on the JSON), or 2 when the
message cannot be read.
"""

import json
import logging
import sys

import dkim
import dns.resolver


def main():
    path, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    try:
        with open(path, "rb") as f:
            message = f.read()
    except OSError as e:
        print(f"cannot read {path}: {e}", file=sys.stderr)
        return 2

    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers = [ip]
    resolver.port = port

    def txt(name, timeout=5):
        """The first TXT record at `name`, its strings joined (dkimpy's dnsfunc contract)."""
        if isinstance(name, bytes):
            name = name.decode()
        try:
            answer = resolver.resolve(name, "TXT", lifetime=timeout, raise_on_no_answer=False)
        except dns.resolver.NXDOMAIN:
            return None
        for rrset in answer.response.answer:
            if rrset.rdtype == dns.rdatatype.TXT:
                return b"".join(list(rrset.items)[0].strings)
        return None

    lines = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logger = logging.getLogger("dkim-verify")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Collect())

    verifier = dkim.DKIM(message, logger=logger)
    try:
        verified = bool(verifier.verify(dnsfunc=txt))
    except dkim.DKIMException as e:
        # dkimpy raises for some failures (a body hash mismatch) instead of returning False.
        lines.append(f"{type(e).__name__}: {e}")
        verified = False
    tags = {}
    for name, value in verifier.headers:
        if name.lower() == b"dkim-signature":
            tags = dkim.util.parse_tag_value(value)
            break
    print(json.dumps({
        "verified": verified,
        "domain": tags.get(b"d", b"").decode(),
        "selector": tags.get(b"s", b"").decode(),
        "headers": tags.get(b"h", b"").decode().replace(" ", "").replace("\r\n", ""),
        "log": lines,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""An SMTP server on loopback that Herald's integration tests deliver email to.

Usage: python smtp_sink.py --dir DIR [--host 127.0.0.1] [--port 0]

It binds (port 0 picks a free port), prints exactly `READY <port>` on stdout and flushes, so
the test harness learns the real port without racing for it. Every accepted message is stored
as DIR/messages/<n>.eml (the bytes as received, after dot-unstuffing) and then described by one
JSON line in DIR/messages.jsonl; the .eml is written first, so a reader that sees the line can
read the file.

Per-recipient behaviour comes from DIR/rules.json, re-read at every RCPT so a test can change
it while the server runs (a missing file accepts everyone). It maps a lower-cased recipient
address to a rule:

  "accept"     accept the recipient
  "550"        550 5.1.1 <addr>: Recipient address rejected: User unknown
  "451"        451 4.3.0 <addr>: Temporary failure, try again later
  "slow:<ms>"  accept the recipient, then wait <ms> before accepting the DATA

There is no TLS. AUTH PLAIN and LOGIN are offered on the plain connection and any credentials
are accepted, so a client configured with a username works; the username is recorded.
SIGTERM and SIGINT stop the server and exit 0.
"""

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from email.parser import BytesHeaderParser
from email.policy import default as default_policy

from aiosmtpd.smtp import SMTP, AuthResult

RULE_ACCEPT = "accept"
RULE_SLOW_PREFIX = "slow:"


class Sink:
    """The aiosmtpd handler: applies the rules and stores messages."""

    def __init__(self, directory):
        self.directory = directory
        self.messages_dir = os.path.join(directory, "messages")
        self.jsonl_path = os.path.join(directory, "messages.jsonl")
        self.rules_path = os.path.join(directory, "rules.json")
        os.makedirs(self.messages_dir, exist_ok=True)
        # Continue numbering if the directory is reused, so <n>.eml is never overwritten.
        self.count = 0
        if os.path.exists(self.jsonl_path):
            with open(self.jsonl_path, "rb") as f:
                self.count = sum(1 for line in f if line.strip())

    def read_rules(self):
        """The current rules, or None when rules.json cannot be used (the RCPT then fails)."""
        try:
            with open(self.rules_path, encoding="utf-8") as f:
                rules = json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            print(f"smtp_sink: cannot read {self.rules_path}: {e}", file=sys.stderr, flush=True)
            return None
        if not isinstance(rules, dict):
            print(f"smtp_sink: {self.rules_path} is not a JSON object", file=sys.stderr, flush=True)
            return None
        return rules

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        rules = self.read_rules()
        if rules is None:
            return "451 4.3.0 smtp_sink: unreadable rules.json"
        rule = rules.get(address.lower(), RULE_ACCEPT)
        if rule == "550":
            return f"550 5.1.1 <{address}>: Recipient address rejected: User unknown"
        if rule == "451":
            return f"451 4.3.0 <{address}>: Temporary failure, try again later"
        if isinstance(rule, str) and rule.startswith(RULE_SLOW_PREFIX):
            try:
                delay_ms = int(rule[len(RULE_SLOW_PREFIX):])
            except ValueError:
                delay_ms = None
            if delay_ms is None or delay_ms < 0:
                return self.unknown_rule(address, rule)
            # The delay belongs to this transaction; the longest one among its recipients wins.
            envelope.slow_ms = max(getattr(envelope, "slow_ms", 0), delay_ms)
        elif rule != RULE_ACCEPT:
            return self.unknown_rule(address, rule)
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    @staticmethod
    def unknown_rule(address, rule):
        # A typo in a test's rule must fail loudly rather than silently accept.
        print(f"smtp_sink: unknown rule {rule!r} for {address}", file=sys.stderr, flush=True)
        return f"554 5.3.0 <{address}>: smtp_sink: unknown rule {rule!r}"

    async def handle_DATA(self, server, session, envelope):
        slow_ms = getattr(envelope, "slow_ms", 0)
        if slow_ms:
            # Storing happens after the wait: a client that gives up during it leaves no message.
            await asyncio.sleep(slow_ms / 1000)
        raw = envelope.original_content or b""
        self.count += 1
        n = self.count
        eml_path = os.path.join(self.messages_dir, f"{n}.eml")
        with open(eml_path, "wb") as f:
            f.write(raw)
        # For the built-in PLAIN and LOGIN mechanisms auth_data is a LoginPassword.
        login = getattr(session.auth_data, "login", None) if session.authenticated else None
        record = {
            "n": n,
            "mail_from": envelope.mail_from,
            "rcpt_tos": list(envelope.rcpt_tos),
            "message_id": message_id(raw),
            "size": len(raw),
            "auth_user": login.decode("utf-8", "replace") if isinstance(login, bytes) else login,
        }
        # One write per line, so a concurrent reader never sees half of one (it ignores an
        # unterminated last line anyway).
        with open(self.jsonl_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        return f"250 2.0.0 OK queued as {n}"


def message_id(raw):
    """The Message-ID header's value (stripped), or None."""
    headers = BytesHeaderParser(policy=default_policy).parsebytes(raw)
    value = headers.get("Message-ID")
    if value is None:
        return None
    value = str(value).strip()
    return value or None


def accept_any_credentials(server, session, envelope, mechanism, auth_data):
    return AuthResult(success=True, auth_data=auth_data)


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", required=True, help="where messages and rules.json live")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args()

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    # aiosmtpd warns about its own use of a deprecated attribute on every AUTH.
    logging.getLogger("mail.log").addFilter(
        lambda record: "login_data is deprecated" not in record.getMessage()
    )
    handler = Sink(args.dir)
    loop = asyncio.get_running_loop()

    def protocol():
        return SMTP(
            handler,
            # Without a hostname aiosmtpd calls getfqdn(), which can stall on a resolver.
            hostname="smtp-sink.test",
            enable_SMTPUTF8=True,
            auth_require_tls=False,
            authenticator=accept_any_credentials,
            loop=loop,
        )

    server = await loop.create_server(protocol, host=args.host, port=args.port)
    port = server.sockets[0].getsockname()[1]

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    print(f"READY {port}", flush=True)
    await stop.wait()

    server.close()
    # Newer Pythons wait here for open connections too; a client stuck mid-session must not
    # keep the sink alive.
    try:
        await asyncio.wait_for(server.wait_closed(), timeout=2)
    except asyncio.TimeoutError:
        pass


if __name__ == "__main__":
    asyncio.run(main())

"""Delivers one message over SMTP as a mail server would, with Python's smtplib (an SMTP client
nobody here wrote), and reports every reply, refusals included, instead of raising on them.

Usage: python smtp_send.py HOST PORT MAIL_FROM RCPT [RCPT ...] < MESSAGE

MAIL_FROM may be empty (the null sender `<>` of delivery status notifications). DATA is sent
even when every RCPT was refused, to show what the server answers then; the message itself is
sent (dot-stuffed, CRLF line ends, by smtplib) only after a 354 ("data" is then [354, ""]).

Prints one JSON object and exits 0:
  {"ehlo": [code, text], "mail": [code, text], "rcpt": [[code, text], ...],
   "data": [code, text], "message": [code, text] or null}
where "data" is the reply to the DATA command and "message" the reply to the message's end.
"""

import json
import smtplib
import sys


def reply(pair):
    code, text = pair
    return [code, text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)]


def main():
    host, port, mail_from, rcpts = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    message = sys.stdin.buffer.read()
    result = {"message": None}
    with smtplib.SMTP(host, port, timeout=30) as smtp:
        result["ehlo"] = reply(smtp.ehlo("mta.smtp-send.test"))
        result["mail"] = reply(smtp.mail(mail_from))
        result["rcpt"] = [reply(smtp.rcpt(rcpt)) for rcpt in rcpts]
        if any(200 <= code < 300 for code, _ in result["rcpt"]):
            try:
                # smtplib sends the message (CRLF line ends, dots stuffed) after a 354 only.
                result["message"] = reply(smtp.data(message))
                result["data"] = [354, ""]
            except smtplib.SMTPDataError as refused:
                result["data"] = reply((refused.smtp_code, refused.smtp_error))
        else:
            result["data"] = reply(smtp.docmd("DATA"))
        try:
            smtp.quit()
        except smtplib.SMTPServerDisconnected:
            pass
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

import os
from http.server import BaseHTTPRequestHandler, HTTPServer

from vakit_client import InvalidSignature, verify_firing

SECRET = os.environ["VAKIT_SIGNING_SECRET"]  # this owner's secret, whsec_…


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        try:
            firing = verify_firing(body, dict(self.headers), SECRET)
        except InvalidSignature:
            self.send_response(401)
        else:
            # At least once: do the work once per firing.idempotency_key,
            # stored in the same transaction as its effect.
            print(firing.job_id, firing.attempt, firing.payload, flush=True)
            self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


HTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8000"))), Receiver).serve_forever()

"""tests/cond501.py PORT - an S3 partner that predates conditional writes:
every request is passed on to the S3 server at 127.0.0.1:PORT (s3rver),
except a PUT or POST with If-Match or If-None-Match, or a DELETE with
If-Match, which is answered 501 NotImplemented, as S3 did before 2024.
Prints its own port, then one line "501 METHOD PATH" per conditional
request it refused."""
import http.client
import http.server
import sys

UP = int(sys.argv[1])
HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection"}


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def relay(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if (self.command in ("PUT", "POST") and (
                "If-Match" in self.headers or "If-None-Match" in self.headers)) or (
                self.command == "DELETE" and "If-Match" in self.headers):
            print("501 %s %s" % (self.command, self.path), flush=True)
            msg = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NotImplemented"
                   b"</Code><Message>A header you provided implies functionality that is"
                   b" not implemented</Message></Error>")
            self.send_response(501)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
            return
        up = http.client.HTTPConnection("127.0.0.1", UP, timeout=60)
        hdrs = {k: v for k, v in self.headers.items()
                if k.lower() not in HOP and k.lower() != "expect"}
        up.request(self.command, self.path, body=body, headers=hdrs)
        r = up.getresponse()
        data = r.read()
        self.send_response(r.status, r.reason)
        for k, v in r.getheaders():
            if k.lower() not in HOP and k.lower() != "content-length":
                self.send_header(k, v)
        # A HEAD's length is the object's, as the server said it.
        self.send_header("Content-Length", r.getheader("Content-Length", "0")
                         if self.command == "HEAD" else str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        up.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = relay


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
print(srv.server_address[1], flush=True)
srv.serve_forever()

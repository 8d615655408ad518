// Node's own HTTP server (node:http) answering the routes of tests/fakes/http_servers.py,
// for the HTTP client conformance suite (tests/unit/test_http_conformance.py).
// Usage: node http_server.js KEEP_ALIVE_MS; prints the port it listens on (127.0.0.1).
"use strict";
const http = require("node:http");
const fs = require("node:fs");
const zlib = require("node:zlib");

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
// As http_servers.py's HOLD_SECONDS and STALL_SECONDS.
const HOLD_MS = 30000;
const STALL_MS = 30000;
// Until the file `hold` exists (the client makes it once the first piece has arrived).
const held = async (hold) => {
  for (let waited = 0; waited < HOLD_MS; waited += 5) {
    if (fs.existsSync(hold)) return;
    await sleep(5);
  }
  throw new Error(`held: ${hold}`);
};

const server = http.createServer(async (req, res) => {
  try {
    await answer(req, res);
  } catch {
    res.destroy(); // a held piece never released: the connection is closed, unanswered
  }
});

const answer = async (req, res) => {
  for await (const _ of req) {
    // the request body is read and dropped
  }
  const url = new URL(req.url, "http://localhost");
  const n = Number(url.searchParams.get("n") || 3);
  const hold = url.searchParams.get("hold") || "";
  const port = req.socket.remotePort;
  const piece = (i) => `data: ${port} ${i}\n\n`;
  const all = Array.from({ length: n }, (_, i) => piece(i)).join("");
  switch (url.pathname) {
    case "/sse":
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      for (let i = 0; i < n; i++) {
        if (i && hold) await held(hold);
        res.write(piece(i));
      }
      res.end();
      break;
    case "/length":
      res.writeHead(200, { "Content-Length": Buffer.byteLength(all) });
      res.end(all);
      break;
    case "/close":
      // Neither Content-Length nor chunked: the body ends when the connection does.
      res.useChunkedEncodingByDefault = false;
      res.writeHead(200, { "Content-Type": "text/event-stream", Connection: "close" });
      for (let i = 0; i < n; i++) {
        if (i && hold) await held(hold);
        res.write(piece(i));
      }
      res.end();
      break;
    case "/gzip": {
      res.writeHead(200, { "Content-Type": "text/event-stream", "Content-Encoding": "gzip" });
      const gzip = zlib.createGzip();
      gzip.pipe(res);
      for (let i = 0; i < n; i++) {
        if (i && hold) await held(hold);
        gzip.write(piece(i));
        await new Promise((resolve) => gzip.flush(resolve));
      }
      gzip.end();
      break;
    }
    case "/stall":
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      res.write(piece(0));
      await sleep(STALL_MS);
      res.end();
      break;
    case "/big":
      res.writeHead(200, { "X-Big": "a".repeat(60000), "Content-Length": Buffer.byteLength(all) });
      res.end(all);
      break;
    default:
      res.writeHead(404, { "Content-Length": 0 });
      res.end();
  }
};
server.keepAliveTimeout = Number(process.argv[2] || 300);
server.listen(0, "127.0.0.1", () => {
  console.log(server.address().port);
});

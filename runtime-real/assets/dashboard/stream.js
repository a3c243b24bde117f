// The dashboard's shared stream (a SharedWorker, one per browser and
// token): it holds the one EventSource of every page of this dashboard
// and hands each event to each page. A browser keeps at most 6 HTTP/1.1
// connections per host, and an EventSource holds one for good, so a page
// per stream would leave a 7th page unable to load.
//
// A page that joins late gets what a new stream would give it: the last
// `hello`, the last `snapshot` and every event since (at most RING_MAX;
// past that the worker opens a fresh stream for all, whose snapshot every
// page takes). Resuming is the server's: the worker reconnects with its
// last id (the browser's own reconnect sends it as Last-Event-ID).
"use strict";
const KINDS = ["hello", "snapshot", "node", "groups", "pipeline", "log", "run", "gap"];
const RING_MAX = 4096;
const token = new URLSearchParams(self.location.search).get("token") || "";
const ports = new Set();
const id = Array.from(crypto.getRandomValues(new Uint8Array(6)), (b) => b.toString(16).padStart(2, "0")).join("");
let source = null;
let lastId = null;
let opened = 0;
let connected = null;
// Since the last snapshot: its hello, the snapshot, every event after.
let since = [];
let stale = false;

function post(port, message) {
  try { port.postMessage(message); } catch (_) { ports.delete(port); }
}
function all(message) { for (const port of ports) post(port, message); }
function info() { return { type: "info", worker: id, opened, connected }; }

function open(resume) {
  if (source) source.close();
  let url = "/events?token=" + encodeURIComponent(token);
  if (resume) url += "&last_event_id=" + encodeURIComponent(resume);
  const es = new EventSource(url);
  source = es;
  opened += 1;
  for (const kind of KINDS) {
    es.addEventListener(kind, (ev) => {
      if (source !== es) return;
      if (ev.lastEventId) lastId = ev.lastEventId;
      const event = { type: "event", kind, id: ev.lastEventId, data: ev.data };
      keep(event);
      all(event);
    });
  }
  es.onopen = () => { if (source === es) { connected = true; all(info()); } };
  es.onerror = () => { if (source === es) { connected = false; all(info()); } };
}

function keep(event) {
  if (event.kind === "hello") {
    since.push(event);
  } else if (event.kind === "snapshot") {
    const hello = since.filter((e) => e.kind === "hello").pop();
    since = hello ? [hello, event] : [event];
    stale = false;
  } else if (!stale) {
    since.push(event);
  }
  if (since.length > RING_MAX) { stale = true; since = []; }
}

self.onconnect = (e) => {
  const port = e.ports[0];
  ports.add(port);
  port.onmessage = (m) => {
    const what = m.data && m.data.type;
    if (what === "leave") ports.delete(port);
    // A page asks the stream to reconnect, resuming after the last id.
    if (what === "reconnect") open(lastId);
  };
  port.start();
  post(port, info());
  if (!source) { open(null); return; }
  // Too much since the last snapshot to hand over: a fresh stream, whose
  // snapshot every page takes.
  if (stale) { open(null); return; }
  for (const event of since) post(port, event);
};

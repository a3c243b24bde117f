// The page's end of the stream: through the dashboard's SharedWorker
// (`/stream.js`), which holds one EventSource for every page of this
// browser, or, where SharedWorker is missing or refused, an EventSource
// of the page's own. Either way the page gets each event in order as
// (kind, id, data text) and can ask for a reconnect that resumes after the
// last id.
window.droverFeed = function (token, kinds, deliver, status) {
  "use strict";
  const q = encodeURIComponent;
  const feed = { mode: null, streams: 0, worker: null, workerStreams: 0 };
  let own = null;
  let lastId = null;

  function openOwn(resumeFrom) {
    feed.mode = "own";
    let url = "/events?token=" + q(token);
    if (resumeFrom) url += "&last_event_id=" + q(resumeFrom);
    const es = new EventSource(url);
    if (own) own.close();
    own = es;
    feed.streams += 1;
    for (const kind of kinds) {
      es.addEventListener(kind, (ev) => {
        if (own !== es) return;
        if (ev.lastEventId) lastId = ev.lastEventId;
        deliver(kind, ev.lastEventId, ev.data);
      });
    }
    es.onopen = () => status(true);
    es.onerror = () => status(false);
  }

  function openShared() {
    let worker;
    try {
      worker = new SharedWorker("/stream.js?token=" + q(token), { name: "drover-dashboard" });
    } catch (_) {
      return false;
    }
    feed.mode = "shared";
    const port = worker.port;
    // The worker's script did not load (refused, or an old page): this
    // page streams on its own.
    worker.onerror = () => { if (feed.mode === "shared") { feed.mode = null; openOwn(lastId); } };
    port.onmessage = (m) => {
      if (feed.mode !== "shared") return;
      const msg = m.data;
      if (msg.type === "event") {
        if (msg.id) lastId = msg.id;
        deliver(msg.kind, msg.id, msg.data);
      } else if (msg.type === "info") {
        feed.worker = msg.worker;
        feed.workerStreams = msg.opened;
        if (msg.connected != null) status(msg.connected);
      }
    };
    port.start();
    addEventListener("pagehide", () => port.postMessage({ type: "leave" }));
    feed.port = port;
    return true;
  }

  // A reconnect that resumes after the last id: the shared stream's, or
  // the page's own.
  feed.reconnect = () => {
    if (feed.mode === "shared") feed.port.postMessage({ type: "reconnect" });
    else openOwn(lastId);
  };
  if (typeof SharedWorker !== "function" || !openShared()) openOwn(null);
  return feed;
};

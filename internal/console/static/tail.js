// Live tail: reads the page's server-sent events and adds one row per ring,
// newest first. No library: the console works on a closed network.
(function () {
  "use strict";
  var table = document.getElementById("tail");
  var state = document.getElementById("tail-state");
  if (!table) return;
  var body = table.tBodies[0];
  var prefix = table.getAttribute("data-clock-prefix");
  function setState(s, text) {
    state.setAttribute("data-state", s);
    state.textContent = text;
  }
  function cell(row, text, cls) {
    var td = row.insertCell(-1);
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }
  var es = new EventSource(table.getAttribute("data-src"));
  es.addEventListener("ready", function () { setState("ready", "watching: new rings appear below"); });
  es.addEventListener("failed", function (e) { setState("failed", "stopped: " + JSON.parse(e.data).error); });
  es.addEventListener("ring", function (e) {
    var r = JSON.parse(e.data);
    var row = body.insertRow(0);
    row.className = "ring";
    cell(row, r.received_at);
    var td = row.insertCell(-1);
    var a = document.createElement("a");
    a.href = prefix + encodeURIComponent(r.business_id);
    a.textContent = r.business_id;
    a.className = "business-id";
    td.appendChild(a);
    cell(row, r.message_id);
    cell(row, String(r.attempt), "num");
    cell(row, r.occurrence || r.ring_at);
    cell(row, r.lateness_ms.toFixed(1) + " ms", "num");
    cell(row, new TextEncoder().encode(r.payload).length < r.payload_bytes ? r.payload + "…" : r.payload, "payload");
    while (body.rows.length > 500) body.deleteRow(-1);
  });
  es.onerror = function () {
    if (es.readyState === EventSource.CLOSED) setState("failed", "disconnected");
    else setState("connecting", "reconnecting…");
  };
})();

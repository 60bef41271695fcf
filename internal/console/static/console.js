// Live parts of the console: the daemon page's rollout follows the
// server's events; bake countdowns tick. Pages read fine without this.
"use strict";
(function () {
  function tick() {
    var now = Date.now() / 1000;
    document.querySelectorAll(".countdown[data-until]").forEach(function (el) {
      var left = Math.max(0, Math.round(Number(el.dataset.until) - now));
      el.textContent = left > 0 ? Math.floor(left / 60) + " min " + (left % 60) + " s left" : "done";
    });
  }
  setInterval(tick, 1000);
  tick();
  var live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  var es = new EventSource(live.dataset.src), cells = {};
  function index() {
    cells = {};
    live.querySelectorAll("#cells > li").forEach(function (li) { cells[li.dataset.instance] = li; });
  }
  index();
  function updated() {
    live.dataset.updated = String(Date.now());
    tick();
  }
  // Parts and cells are server-rendered and escaped by its templates.
  es.addEventListener("html", function (e) {
    live.innerHTML = e.data;
    index();
    updated();
  });
  // A patch carries only what changed: parts whole, cells one by one.
  es.addEventListener("patch", function (e) {
    var p = JSON.parse(e.data);
    ["head", "legend", "deps"].forEach(function (k) {
      var el = document.getElementById("live-" + k);
      if (el && typeof p[k] === "string") el.innerHTML = p[k];
    });
    (p.cells || []).forEach(function (c) {
      var old = cells[c[0]], t = document.createElement("template");
      if (!old) return;
      t.innerHTML = c[1];
      var n = t.content.firstElementChild;
      old.replaceWith(n);
      cells[c[0]] = n;
    });
    updated();
  });
  es.addEventListener("end", function () { es.close(); });
})();
// Task logs, events and the task definition editor: lines and rows come
// as JSON and are added as text, never as markup.
(function () {
  var logs = document.getElementById("logs");
  if (logs && logs.dataset.src && window.EventSource) {
    var ls = new EventSource(logs.dataset.src);
    ls.addEventListener("line", function (e) {
      var l = JSON.parse(e.data), span = document.createElement("span");
      span.className = l.stream;
      span.title = l.time;
      span.textContent = l.message + "\n";
      var atEnd = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
      logs.appendChild(span);
      if (atEnd) logs.scrollTop = logs.scrollHeight;
    });
    var stop = function (e) {
      ls.close();
      var note = document.getElementById("logs-note");
      if (note && e.data) note.textContent = e.data;
    };
    ls.addEventListener("end", stop);
    ls.addEventListener("failure", stop);
  }
  var table = document.getElementById("events");
  if (table && table.dataset.src && window.EventSource) {
    var es = new EventSource(table.dataset.src), body = table.tBodies[0];
    es.addEventListener("event", function (e) {
      var ev = JSON.parse(e.data), tr = document.createElement("tr");
      if (body.querySelector("tr.empty")) body.innerHTML = "";
      tr.className = "new";
      tr.dataset.id = ev.id;
      [ev.time, ev.type, ev.summary].forEach(function (t) {
        var td = document.createElement("td");
        td.textContent = t;
        tr.appendChild(td);
      });
      var res = document.createElement("td");
      ev.resources.forEach(function (r) {
        var el = document.createElement(r.href ? "a" : "span");
        if (r.href) el.href = r.href;
        el.textContent = r.name;
        res.appendChild(el);
        res.appendChild(document.createTextNode(" "));
      });
      tr.appendChild(res);
      body.insertBefore(tr, body.firstChild);
    });
    es.addEventListener("end", function () { es.close(); });
    es.addEventListener("failure", function () { es.close(); });
  }
  var ta = document.getElementById("tdjson");
  if (ta && ta.dataset.errorLine) {
    // Select the line the error names.
    var lines = ta.value.split("\n"), n = Number(ta.dataset.errorLine) - 1, start = 0;
    for (var i = 0; i < n && i < lines.length; i++) start += lines[i].length + 1;
    ta.focus();
    ta.setSelectionRange(start, start + (lines[n] || "").length);
    ta.scrollTop = Math.max(0, n - 3) * 18;
  }
})();

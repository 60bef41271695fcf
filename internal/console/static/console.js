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
  var es = new EventSource(live.dataset.src);
  es.addEventListener("html", function (e) {
    // Server-rendered and escaped by its templates.
    live.innerHTML = e.data;
    live.dataset.updated = String(Date.now());
    tick();
  });
  es.addEventListener("end", function () { es.close(); });
})();

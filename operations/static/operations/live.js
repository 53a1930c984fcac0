// The operation page's live panel: show the snapshot the page was rendered with, then follow
// the admin's Server-Sent Events stream (#op-live's data-watch-url) until the operation is done.
(function () {
  "use strict";
  function start() {
    var panel = document.getElementById("op-live");
    if (!panel) return;
    var $ = function (id) { return document.getElementById(id); };
    var colors = JSON.parse(panel.dataset.stateColors || "{}");
    function show(op) {
      var p = op.progress;
      $("op-live-state").textContent = op.state + (op.cancelRequested && !op.done ? " (cancel requested)" : "");
      $("op-live-attempts").textContent = op.attempts;
      $("op-live-revision").textContent = op.revision;
      var parts = [];
      if (p.unitsTotal) parts.push(p.unitsDone.toLocaleString() + " of " + p.unitsTotal.toLocaleString());
      if (p.count || (p.countLabel && !p.unitsTotal)) parts.push(p.count.toLocaleString() + " " + (p.countLabel || ""));
      if (p.unit) parts.push("now: " + p.unit);
      $("op-live-progress").textContent = parts.join(" · ");
      $("op-live-message").textContent = p.message || "";
      if (p.unitsTotal) {
        $("op-live-bar-wrap").hidden = false;
        $("op-live-bar").style.width = Math.min(100, 100 * p.unitsDone / p.unitsTotal) + "%";
        // The state's colour: green once succeeded, red failed, amber cancelled.
        if (colors[op.state]) $("op-live-bar").style.background = colors[op.state];
        $("op-live-bar").dataset.state = op.state;
      } else {
        $("op-live-bar-wrap").hidden = true;  // no denominator: no bar pretending to know the end
      }
    }
    var initial = JSON.parse($("op-initial").textContent);
    show(initial);
    if (initial.done || !window.EventSource) return;
    var source = new EventSource(panel.dataset.watchUrl);
    $("op-live-status").textContent = "following…";
    source.addEventListener("operation", function (e) {
      var op = JSON.parse(e.data);
      show(op);
      if (op.done) { source.close(); $("op-live-status").textContent = "finished"; setTimeout(function () { location.reload(); }, 600); }
    });
    source.addEventListener("gone", function () { source.close(); $("op-live-status").textContent = "deleted"; });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

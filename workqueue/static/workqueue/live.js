// Live pages without reloading: the dashboard, the work-item list and the Workers page fetch
// themselves every few seconds and swap in the parts marked live (#wq-live's data-regions, CSS
// selectors), leaving the rest of the page (scroll, a half-typed filter) alone. A page is not
// touched while the operator is working in it: rows ticked for an action, or focus in a form
// inside a live part. The Pause button stops it (remembered per page in sessionStorage).
// Without JavaScript the page is the same, only still.
(function () {
  "use strict";
  // The admin's duration words (workqueue_admin.duration): '42 s', '3 min', '2 h 5 min', '4 d 3 h'.
  function duration(seconds) {
    var s = Math.floor(Math.abs(seconds));
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min";
    if (s < 86400) { var m = Math.floor(s / 60) % 60; return Math.floor(s / 3600) + " h" + (m ? " " + m + " min" : ""); }
    var h = Math.floor(s / 3600) % 24;
    return Math.floor(s / 86400) + " d" + (h ? " " + h + " h" : "");
  }
  // Each <time class="wq-countdown" data-wait="seconds"> counts down from when it was drawn.
  function countDown() {
    var now = performance.now();
    document.querySelectorAll("time.wq-countdown").forEach(function (el) {
      if (!el.dataset.drawnAt) el.dataset.drawnAt = String(now);
      var left = parseFloat(el.dataset.wait) - (now - parseFloat(el.dataset.drawnAt)) / 1000;
      var text = left <= 0 ? "due now" : "in " + duration(left);
      if (el.textContent !== text) el.textContent = text;
    });
  }
  function startCountdowns() {
    if (!document.querySelector("time.wq-countdown")) return;
    countDown();
    setInterval(countDown, 1000);
  }
  function start() {
    startCountdowns();
    var root = document.getElementById("wq-live");
    if (!root || !window.fetch || !window.DOMParser) return;
    var selectors = (root.dataset.regions || "").split("|").filter(Boolean);
    var every = Math.max(1, parseFloat(root.dataset.every || "5")) * 1000;
    var button = document.getElementById("wq-live-toggle");
    var status = document.getElementById("wq-live-status");
    var key = "wq-live-paused:" + location.pathname;
    var paused = sessionStorage.getItem(key) === "1";
    var busy = false;

    function show() {
      button.textContent = paused ? "Resume live updates" : "Pause live updates";
      button.setAttribute("aria-pressed", paused ? "true" : "false");
      root.classList.toggle("wq-live-paused", paused);
    }
    function operatorAtWork() {
      if (document.querySelector("#changelist-form input.action-select:checked")) return true;
      var focused = document.activeElement;
      if (!focused || focused === document.body) return false;
      return selectors.some(function (sel) {
        var region = document.querySelector(sel);
        return region && region.contains(focused) && focused.closest("form");
      });
    }
    function tick() {
      if (paused || busy || document.hidden || operatorAtWork()) return;
      busy = true;
      fetch(location.href, { credentials: "same-origin", headers: { "X-Requested-With": "wq-live" } })
        .then(function (response) {
          if (!response.ok || response.redirected) throw new Error("HTTP " + response.status);
          return response.text();
        })
        .then(function (html) {
          if (paused || operatorAtWork()) return;
          var fresh = new DOMParser().parseFromString(html, "text/html");
          selectors.forEach(function (sel) {
            var now = document.querySelectorAll(sel);
            var next = fresh.querySelectorAll(sel);
            if (now.length !== next.length) return;
            for (var i = 0; i < now.length; i++) now[i].replaceWith(document.importNode(next[i], true));
          });
          root.dataset.updated = String((parseInt(root.dataset.updated || "0", 10) || 0) + 1);
          status.textContent = "updated " + new Date().toLocaleTimeString();
          document.dispatchEvent(new CustomEvent("wq-live-updated"));
        })
        .catch(function () { status.textContent = "not updated: the server did not answer"; })
        .then(function () { busy = false; });
    }
    button.addEventListener("click", function () {
      paused = !paused;
      sessionStorage.setItem(key, paused ? "1" : "0");
      show();
      if (!paused) tick();
    });
    root.hidden = false;
    show();
    setInterval(tick, every);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

// gpuledger dashboard live refresh: poll /ui/live.json; when the log position moved, fetch this
// page again and swap its <main> in place (no reload, scroll kept). Stops while the tab is hidden.
// Also: a click on a GPU map cell opens its node's page.
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  var state = document.getElementById("live-state");
  var busy = false;
  function current() { return document.body.getAttribute("data-position") || ""; }
  function refresh() {
    return fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var main = doc.getElementById("main");
        if (!main) { return; }
        document.getElementById("main").replaceWith(document.adoptNode(main));
        document.body.setAttribute("data-position", doc.body.getAttribute("data-position") || "");
        var pos = document.getElementById("position");
        if (pos) { pos.textContent = document.body.getAttribute("data-position"); }
      });
  }
  function tick() {
    if (busy || document.hidden || !current()) { return; }
    busy = true;
    fetch("/ui/live.json", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
      .then(function (live) {
        if (String(live.position) !== current()) { return refresh(); }
      })
      .then(function () { if (state) { state.textContent = "live refresh on"; } })
      .catch(function (err) { if (state) { state.textContent = "live refresh paused: " + err.message; } })
      .then(function () { busy = false; });
  }
  setInterval(tick, PERIOD_MS);
  // GPU map: a click on a node's box (any of its GPU cells) opens that node's page.
  document.addEventListener("click", function (event) {
    var box = event.target.closest ? event.target.closest(".map .n") : null;
    if (!box || event.target.closest("a")) { return; }
    var link = box.querySelector("a");
    if (link) { window.location.href = link.href; }
  });
})();

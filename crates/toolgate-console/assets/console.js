// toolgate console: live updates for pages that ask for them (data-live).
// Every screen reads and works without this script; it only saves a reload.
"use strict";
(function () {
  var live = document.querySelector("[data-live]");
  if (!live || !window.EventSource) return;
  var source = new EventSource(live.getAttribute("data-live"));
  source.addEventListener("inbox", function (e) {
    live.innerHTML = e.data; // server-rendered, escaped HTML of the same page
  });
  source.addEventListener("count", function (e) {
    document.querySelectorAll("[data-pending]").forEach(function (n) { n.textContent = e.data; });
  });
})();

// Live refresh: every data-refresh seconds, fetch this page again and swap <main>.
// Paused while the tab is hidden or a form field has focus; 0 turns it off.
(function () {
  "use strict";
  var main = document.getElementById("live");
  var every = main ? parseFloat(main.dataset.refresh || "0") : 0;
  if (!every) return;
  function busy() {
    var a = document.activeElement;
    return document.hidden || (a && (a.tagName === "INPUT" || a.tagName === "BUTTON"));
  }
  function tick() {
    if (busy()) return setTimeout(tick, every * 1000);
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        var now = document.getElementById("live");
        if (fresh && now && !busy()) now.innerHTML = fresh.innerHTML;
        document.body.classList.remove("stale");
      })
      .catch(function () { document.body.classList.add("stale"); })
      .then(function () { setTimeout(tick, every * 1000); });
  }
  setTimeout(tick, every * 1000);
})();

// loghubd console: refresh the regions marked data-live in place (no reload, no framework).
// Each region asks the same page for its own HTML (header X-Console-Region); opened log
// records and keyboard focus survive the swap. Without JavaScript the pages are complete as
// served; this only keeps them current.
(function () {
  "use strict";
  var updated = document.getElementById("updated");
  function stamp(el) {
    el.removeAttribute("data-stale");
    if (updated) { updated.textContent = "updated " + new Date().toLocaleTimeString(); }
  }
  function refresh(el) {
    if (document.hidden) { return; }
    fetch(el.getAttribute("data-live"), {
      headers: { "X-Console-Region": el.id }, credentials: "same-origin", cache: "no-store"
    }).then(function (r) {
      if (r.status === 401) { window.location.reload(); }
      if (!r.ok) { throw new Error("HTTP " + r.status); }
      return r.text();
    }).then(function (html) {
      if (html === el.lastHtml) { stamp(el); return; }  // nothing changed: leave the DOM be
      el.lastHtml = html;
      var open = [], focused = document.activeElement;
      var focusId = focused && el.contains(focused) ? focused.id : "";
      el.querySelectorAll("details[open]").forEach(function (d) { open.push(d.id); });
      el.innerHTML = html;
      open.forEach(function (id) { var d = document.getElementById(id); if (d) { d.open = true; } });
      if (focusId) { var f = document.getElementById(focusId); if (f) { f.focus(); } }
      stamp(el);
    }).catch(function (err) {
      el.setAttribute("data-stale", "1");
      if (updated) { updated.textContent = "not updated: " + err.message; }
    });
  }
  document.querySelectorAll("[data-live]").forEach(function (el) {
    var every = parseInt(el.getAttribute("data-every"), 10) || 2000;
    window.setInterval(function () { refresh(el); }, every);
  });
})();

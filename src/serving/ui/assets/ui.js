// Ballista job history: what every page does with scripts on.
// - times: shown in the viewer's zone (UTC on hover);
// - refresh: a live page (body[data-refresh]) fetches itself and swaps
//   its content while jobs run (a job's timeline redrawn), keeping scroll
//   and focus;
// - config: the search box filters the table as you type.
"use strict";
(function () {
  function pad(n) { return String(n).padStart(2, "0"); }
  function localize(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d)) return;
      if (!el.title) el.title = el.textContent;
      el.textContent = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) +
        " " + pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
    });
  }

  function refresh() {
    var seconds = Number(document.body.dataset.refresh || 0);
    if (!seconds) return;
    var timer = setInterval(function () {
      if (document.hidden) return;
      fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (text) {
          var doc = new DOMParser().parseFromString(text, "text/html");
          var fresh = doc.getElementById("content");
          var here = document.getElementById("content");
          if (!fresh || !here) return;
          var active = document.activeElement && document.activeElement.name;
          here.replaceWith(fresh);
          localize(fresh);
          // A job's timeline draws anew from the fresh page's data.
          if (window.ballistaTimeline) window.ballistaTimeline();
          if (active) {
            var again = fresh.querySelector("[name='" + active + "']");
            if (again) again.focus();
          }
          if (!doc.body.dataset.refresh) {
            clearInterval(timer);
            delete document.body.dataset.refresh;
          }
        })
        .catch(function () { /* the next tick tries again */ });
    }, seconds * 1000);
  }

  function configFilter() {
    var input = document.getElementById("config-filter");
    var table = document.getElementById("config-table");
    if (!input || !table) return;
    input.addEventListener("input", function () {
      var q = input.value.toLowerCase();
      table.querySelectorAll("tbody tr").forEach(function (tr) {
        tr.hidden = q !== "" && tr.textContent.toLowerCase().indexOf(q) < 0;
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    localize(document);
    refresh();
    configFilter();
  });
})();

// Ballista job history: what every page does with scripts on.
// - times: shown in the viewer's zone (UTC on hover);
// - refresh: a live page (body[data-refresh]) fetches itself and swaps
//   its content when its event stream says it changed (every few seconds
//   without one), keeping scroll, focus and the drawn timeline, which
//   grows;
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

  // Fetches the page and swaps its content in, keeping scroll, focus and
  // a drawn timeline, which grows from the new data rather than being
  // drawn anew. `stop` is called once the page is no longer live.
  function update(stop) {
    return fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.getElementById("content");
        var here = document.getElementById("content");
        if (!fresh || !here) return;
        var active = document.activeElement && document.activeElement.name;
        var drawn = document.getElementById("timeline");
        var placeholder = fresh.querySelector("#timeline");
        var grow = drawn && placeholder && drawn.ballistaGrow &&
          drawn.dataset.src === placeholder.dataset.src;
        if (grow) placeholder.replaceWith(drawn);
        here.replaceWith(fresh);
        localize(fresh);
        if (grow) drawn.ballistaGrow();
        else if (window.ballistaTimeline) window.ballistaTimeline();
        document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
        if (active) {
          var again = fresh.querySelector("[name='" + active + "']");
          if (again) again.focus();
        }
        if (!doc.body.dataset.refresh) {
          stop();
          delete document.body.dataset.refresh;
        }
      });
  }

  // A live page (body[data-refresh]) updates when its event stream
  // (/ui/events) says what it shows changed; without one (no
  // EventSource, or the server refused the stream) it fetches itself
  // every data-refresh seconds.
  function refresh() {
    var seconds = Number(document.body.dataset.refresh || 0);
    if (!seconds) return;
    var timer = null, source = null;
    function stop() {
      if (timer) clearInterval(timer);
      timer = null;
      if (source) source.close();
      source = null;
    }
    function poll() {
      if (timer) return;
      document.body.dataset.events = "polling";
      timer = setInterval(function () {
        if (!document.hidden) update(stop).catch(function () { /* the next tick tries again */ });
      }, seconds * 1000);
    }
    if (!window.EventSource) { poll(); return; }
    var job = location.pathname.match(/^\/ui\/job\/([^/]+)$/);
    source = new EventSource("/ui/events" + (job ? "?job_id=" + job[1] : ""));
    var first = true;
    source.addEventListener("change", function () {
      // The first event says the stream is live (and the page is fetched
      // once, for what changed before the stream began); later ones, a change.
      if (first) { first = false; document.body.dataset.events = "live"; }
      update(stop).catch(function () { /* the next change tries again */ });
    });
    source.addEventListener("done", function () {
      if (source) source.close();
      source = null;
      update(stop).catch(function () { poll(); });
    });
    source.onerror = function () {
      // Refused or gone for good (the browser retries a dropped stream
      // itself): fetch every few seconds instead.
      if (source && source.readyState === EventSource.CLOSED) { source = null; poll(); }
    };
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

// The task timeline: one lane per executor (split into rows by concurrent
// tasks), a colour per stage with the stages' spans marked above, failed
// attempts outlined in red, a time axis. Wheel or buttons zoom, drag pans,
// hover tells a task's facts. Drawn on one canvas, so 50,000 tasks stay
// smooth. A running job's timeline grows in place (box.ballistaGrow):
// the page's refresh keeps the drawn box and asks it for the new data.
"use strict";
(function () {
  var PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2",
                 "#edc948", "#9c755f", "#bab0ac", "#ff9da7", "#86bcb6"];
  var LABEL_W = 130, AXIS_H = 22, STAGE_H = 14;

  function fmtMs(ms) {
    if (ms < 1000) return Math.round(ms) + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
    if (ms < 3600000) return Math.floor(ms / 60000) + " min " + String(Math.floor(ms / 1000) % 60).padStart(2, "0") + " s";
    return Math.floor(ms / 3600000) + " h " + String(Math.floor(ms / 60000) % 60).padStart(2, "0") + " min";
  }
  function fmtCount(n) {
    if (n < 1000) return String(n);
    if (n < 1e6) return (n / 1e3).toFixed(1) + " K";
    return (n / 1e6).toFixed(2) + " M";
  }
  function niceStep(span, px) {
    var raw = span / Math.max(1, px / 90), p = Math.pow(10, Math.floor(Math.log10(raw)));
    var m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // A binary min-heap of [key, value] pairs.
  function Heap() { this.a = []; }
  Heap.prototype.size = function () { return this.a.length; };
  Heap.prototype.top = function () { return this.a[0]; };
  Heap.prototype.push = function (key, value) {
    var a = this.a, i = a.length;
    a.push(null);
    while (i > 0) {
      var p = (i - 1) >> 1;
      if (a[p][0] <= key) break;
      a[i] = a[p]; i = p;
    }
    a[i] = [key, value];
  };
  Heap.prototype.pop = function () {
    var a = this.a, top = a[0], last = a.pop(), n = a.length, i = 0;
    if (n === 0) return top;
    for (;;) {
      var l = 2 * i + 1, m = l;
      if (l >= n) break;
      if (l + 1 < n && a[l + 1][0] < a[l][0]) m = l + 1;
      if (a[m][0] >= last[0]) break;
      a[i] = a[m]; i = m;
    }
    a[i] = last;
    return top;
  };

  // Refetches the box's data and hands it to `then`.
  function fetchData(box, then) {
    fetch(box.dataset.src, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(then)
      .catch(function () { /* the next change tries again */ });
  }

  function build(box, d) {
    box.textContent = "";
    if (d.stage.length === 0) {
      box.appendChild(el("p", "muted", "No task attempt is recorded" + (d.complete ? "." : " yet.")));
      box.dataset.drawn = "true";
      // A running job's first tasks draw the timeline.
      box.ballistaGrow = function () {
        fetchData(box, function (d2) { if (d2.stage.length) build(box, d2); });
      };
      return;
    }
    var n, row, lanes, rowsOf, totalRows, rowH, color, stagesH, height, laneIndexOfRow;
    // Places every task in a row of its executor's lane (again when the
    // job's data grows).
    function layout() {
      n = d.stage.length;
      // Rows: per executor, greedy by start.
      var order = new Array(n);
      for (var i = 0; i < n; i++) order[i] = i;
      order.sort(function (a, b) { return d.exec[a] - d.exec[b] || d.start[a] - d.start[b]; });
      row = new Int32Array(n); lanes = []; rowsOf = [];
      // Each task takes the first row of its lane free at its start: rows
      // that are busy wait in a heap by their end, free ones in a heap by
      // index, so 150,000 overlapping tasks are placed in O(n log n).
      var cur = -1, rows = 0, base = 0, busy = null, free = null;
      for (var k = 0; k < n; k++) {
        var t = order[k];
        if (d.exec[t] !== cur) {
          if (cur >= 0) { lanes.push({ exec: cur, first: base, rows: rows }); base += rows; }
          cur = d.exec[t]; rows = 0; busy = new Heap(); free = new Heap();
        }
        while (busy.size() && busy.top()[0] <= d.start[t]) { var done = busy.pop(); free.push(done[1], done[1]); }
        var r = free.size() ? free.pop()[1] : rows++;
        busy.push(Math.max(d.finish[t], d.start[t] + 1), r);
        row[t] = base + r;
        (rowsOf[base + r] = rowsOf[base + r] || []).push(t);
      }
      lanes.push({ exec: cur, first: base, rows: rows });
      totalRows = base + rows;
      rowH = totalRows > 300 ? 3 : totalRows > 120 ? 5 : totalRows > 40 ? 8 : 12;
      color = {};
      d.stages.forEach(function (s, i) { color[s.id] = i % PALETTE.length; });
      stagesH = d.stages.length * STAGE_H + 4;
      height = AXIS_H + stagesH + totalRows * rowH + lanes.length * 3 + 6;
      laneIndexOfRow = new Int32Array(totalRows);
      lanes.forEach(function (l, li) { for (var q = 0; q < l.rows; q++) laneIndexOfRow[l.first + q] = li; });
    }
    layout();

    // Tools, legend, canvas, tooltip.
    var tools = el("div", "tools");
    var zin = el("button", "", "Zoom in"), zout = el("button", "", "Zoom out"), reset = el("button", "", "Reset");
    [zin, zout, reset].forEach(function (b) { b.type = "button"; tools.appendChild(b); });
    var legend = el("div", "legend");
    function fillLegend() {
      legend.textContent = "";
      d.stages.forEach(function (s) {
        var item = el("span");
        var sw = el("span", "swatch sw" + color[s.id]);
        item.appendChild(sw);
        item.appendChild(document.createTextNode("Stage " + s.id));
        legend.appendChild(item);
      });
      legend.appendChild(el("span", "", "failed attempt: red outline"));
    }
    fillLegend();
    tools.appendChild(legend);
    var hint = el("span", "muted", "wheel or +/− to zoom, drag or ←/→ to pan");
    tools.appendChild(hint);
    box.appendChild(tools);
    var canvas = el("canvas");
    canvas.tabIndex = 0;
    canvas.setAttribute("role", "img");
    function label() {
      canvas.setAttribute("aria-label", "Task timeline: " + n + " task attempts on " + d.executors.length +
        " executors over " + fmtMs(d.end) + ". The stage table above has the same numbers.");
      box.dataset.tasks = String(n);
    }
    label();
    box.appendChild(canvas);
    var tip = el("div", "tip");
    box.appendChild(tip);

    var view = { from: 0, to: Math.max(1, d.end) };
    var css = getComputedStyle(document.documentElement);
    var fg = css.getPropertyValue("--fg").trim() || "#000";
    var muted = css.getPropertyValue("--muted").trim() || "#666";
    var line = css.getPropertyValue("--line").trim() || "#ccc";
    var bad = css.getPropertyValue("--bad").trim() || "#d00";
    var laneTop = function (lane) {
      return AXIS_H + stagesH + lane.first * rowH + lanes.indexOf(lane) * 3;
    };
    var rowY = function (r) { return AXIS_H + stagesH + r * rowH + laneIndexOfRow[r] * 3; };
    var width = 0, plotW = 0, scheduled = false;

    function x(ms) { return LABEL_W + (ms - view.from) / (view.to - view.from) * plotW; }

    function draw() {
      scheduled = false;
      var dpr = window.devicePixelRatio || 1;
      width = canvas.clientWidth || box.clientWidth || 800;
      plotW = Math.max(50, width - LABEL_W - 8);
      canvas.width = Math.round(width * dpr);
      canvas.height = Math.round(height * dpr);
      canvas.style.height = height + "px";
      var g = canvas.getContext("2d");
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      g.clearRect(0, 0, width, height);
      g.font = "11px system-ui, sans-serif";
      g.textBaseline = "middle";
      // Axis and grid.
      var span = view.to - view.from, step = niceStep(span, plotW);
      g.strokeStyle = line; g.fillStyle = muted; g.lineWidth = 1;
      for (var tk = Math.ceil(view.from / step) * step; tk <= view.to; tk += step) {
        var tx = Math.round(x(tk)) + 0.5;
        g.beginPath(); g.moveTo(tx, AXIS_H - 4); g.lineTo(tx, height); g.stroke();
        g.fillText(fmtMs(tk), tx + 3, AXIS_H / 2);
      }
      // Stages: their spans, and their boundaries across the lanes.
      d.stages.forEach(function (s, i) {
        var y = AXIS_H + i * STAGE_H + 2, x0 = Math.max(LABEL_W, x(s.start)), x1 = Math.min(width, x(Math.max(s.end, s.start + 1)));
        g.fillStyle = fg;
        g.fillText("Stage " + s.id + " · " + s.status, 4, y + STAGE_H / 2 - 1);
        if (x1 > LABEL_W && x0 < width) {
          g.fillStyle = PALETTE[color[s.id]];
          g.fillRect(x0, y + 2, Math.max(1, x1 - x0), STAGE_H - 5);
        }
        g.strokeStyle = PALETTE[color[s.id]]; g.setLineDash([3, 3]);
        [s.start, s.end].forEach(function (t) {
          var bx = Math.round(x(t)) + 0.5;
          if (bx >= LABEL_W && bx <= width) { g.beginPath(); g.moveTo(bx, AXIS_H + stagesH); g.lineTo(bx, height); g.stroke(); }
        });
        g.setLineDash([]);
      });
      // Lanes.
      lanes.forEach(function (l, li) {
        var top = laneTop(l);
        g.fillStyle = fg;
        var name = d.executors[l.exec] || ("executor " + l.exec);
        if (name.length > 18) name = name.slice(0, 17) + "…";
        g.fillText(name, 4, top + Math.min(l.rows * rowH, 14) / 2 + 1);
        g.strokeStyle = line;
        g.beginPath(); g.moveTo(0, top - 1.5); g.lineTo(width, top - 1.5); g.stroke();
      });
      // Tasks: fills by stage, then failed outlines on top.
      var h = Math.max(1, rowH - 1);
      for (var c = 0; c < PALETTE.length; c++) {
        g.fillStyle = PALETTE[c];
        for (var t = 0; t < n; t++) {
          if (color[d.stage[t]] !== c) continue;
          var a = x(d.start[t]), b = x(d.finish[t]);
          if (b < LABEL_W || a > width) continue;
          a = Math.max(a, LABEL_W);
          g.fillRect(a, rowY(row[t]), Math.max(1, b - a), h);
        }
      }
      g.strokeStyle = bad; g.lineWidth = 1.5;
      for (var f = 0; f < n; f++) {
        if (!d.failed[f]) continue;
        var fa = Math.max(x(d.start[f]), LABEL_W), fb = x(d.finish[f]);
        if (fb < LABEL_W || fa > width) continue;
        g.strokeRect(fa, rowY(row[f]) + 0.5, Math.max(2, fb - fa), Math.max(2, h - 1));
      }
      if (!box.dataset.drawn) {
        box.dataset.drawn = "true";
        if (window.performance && performance.mark) performance.mark("timeline-drawn");
      }
    }
    function later() { if (!scheduled) { scheduled = true; requestAnimationFrame(draw); } }
    function zoom(factor, at) {
      var span = view.to - view.from, c = at === undefined ? view.from + span / 2 : at;
      var next = Math.max(1, span * factor);
      view.from = c - (c - view.from) * next / span;
      view.to = view.from + next;
      later();
    }
    function pan(ms) { view.from += ms; view.to += ms; later(); }
    function timeAt(px) { return view.from + (px - LABEL_W) / plotW * (view.to - view.from); }

    canvas.addEventListener("wheel", function (e) {
      e.preventDefault();
      var rect = canvas.getBoundingClientRect();
      zoom(e.deltaY > 0 ? 1.25 : 0.8, timeAt(e.clientX - rect.left));
    }, { passive: false });
    var drag = null;
    canvas.addEventListener("pointerdown", function (e) { drag = { x: e.clientX, from: view.from, to: view.to }; canvas.setPointerCapture(e.pointerId); });
    canvas.addEventListener("pointerup", function () { drag = null; });
    canvas.addEventListener("pointermove", function (e) {
      var rect = canvas.getBoundingClientRect();
      if (drag) {
        var dt = (e.clientX - drag.x) / plotW * (drag.to - drag.from);
        view.from = drag.from - dt; view.to = drag.to - dt; later();
        tip.style.display = "none";
        return;
      }
      var px = e.clientX - rect.left, py = e.clientY - rect.top, hit = -1;
      if (px > LABEL_W) {
        var tm = timeAt(px), slack = 2 / plotW * (view.to - view.from);
        for (var r = 0; r < totalRows && hit < 0; r++) {
          var y = rowY(r);
          if (py < y || py > y + rowH) continue;
          var list = rowsOf[r] || [];
          for (var j = 0; j < list.length; j++) {
            var t = list[j];
            if (d.start[t] - slack <= tm && tm <= d.finish[t] + slack) { hit = t; break; }
          }
        }
      }
      if (hit < 0) { tip.style.display = "none"; return; }
      tip.textContent = "Stage " + d.stage[hit] + " · task " + d.task[hit] + " · attempt " + d.attempt[hit] +
        "\nExecutor " + (d.executors[d.exec[hit]] || d.exec[hit]) +
        "\nStatus " + (d.failed[hit] ? "Failed" : "Successful") +
        "\nStarted at +" + fmtMs(d.start[hit]) + ", ran " + fmtMs(d.finish[hit] - d.start[hit]) +
        "\nRows " + fmtCount(d.rows_in[hit]) + " in, " + fmtCount(d.rows_out[hit]) + " out";
      tip.style.display = "block";
      var left = Math.min(px + 14, Math.max(0, canvas.clientWidth - tip.offsetWidth - 4));
      tip.style.left = left + "px";
      tip.style.top = (canvas.offsetTop + py + 14) + "px";
    });
    canvas.addEventListener("pointerleave", function () { tip.style.display = "none"; });
    canvas.addEventListener("keydown", function (e) {
      var span = view.to - view.from;
      if (e.key === "+" || e.key === "=") zoom(0.8);
      else if (e.key === "-") zoom(1.25);
      else if (e.key === "ArrowLeft") pan(-span / 10);
      else if (e.key === "ArrowRight") pan(span / 10);
      else if (e.key === "0") { view.from = 0; view.to = Math.max(1, d.end); later(); }
      else return;
      e.preventDefault();
    });
    zin.addEventListener("click", function () { zoom(0.8); });
    zout.addEventListener("click", function () { zoom(1.25); });
    reset.addEventListener("click", function () { view.from = 0; view.to = Math.max(1, d.end); later(); });
    window.addEventListener("resize", later);
    // More tasks of a running job: the same canvas, laid out again and
    // redrawn in place (never emptied), keeping the zoom unless it showed
    // the whole job, which it then still does.
    box.ballistaGrow = function () {
      fetchData(box, function (d2) {
        var whole = view.from <= 0 && view.to >= d.end;
        d = d2;
        layout();
        fillLegend();
        label();
        if (whole) { view.from = 0; view.to = Math.max(1, d.end); }
        box.dataset.grown = String(Number(box.dataset.grown || 0) + 1);
        later();
      });
    };
    draw();
  }

  function start() {
    var box = document.getElementById("timeline");
    if (!box || box.dataset.started) return;
    box.dataset.started = "true";
    fetch(box.dataset.src, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : r.json().then(function (e) { throw new Error(e.error || r.status); }); })
      .then(function (d) { build(box, d); })
      .catch(function (e) {
        box.textContent = "";
        box.appendChild(el("p", "error-box", "The timeline could not be loaded: " + e.message));
        box.dataset.drawn = "error";
      });
  }
  window.ballistaTimeline = start;
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

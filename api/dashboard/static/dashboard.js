// kernelloop dashboard: the job page's live attempts table, speedup chart and summary.
// Plain JavaScript, no build step. Data: the page's <script id="job-data"> JSON, then the job's
// Server-Sent Events (/jobs/{id}/events, signed in by the session cookie) and /jobs/{id}.
(function () {
  "use strict";
  var dataNode = document.getElementById("job-data");
  if (!dataNode) return;
  var data = JSON.parse(dataNode.textContent);
  var jobId = data.job_id;
  var csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  var attempts = new Map();
  data.attempts.forEach(function (a) { attempts.set(a.n, a); });
  var compileLine = data.compile_line;
  var bestN = data.best_n;
  var SVG = "http://www.w3.org/2000/svg";

  // -- formatting (as api/dashboard/pages.py) -------------------------------------------------
  function finite(v) { return typeof v === "number" && isFinite(v); }
  function fmtMs(v) { return !finite(v) ? "—" : v >= 1 ? v.toFixed(3) : Number(v.toPrecision(3)).toString(); }
  function fmtX(v) { return finite(v) ? v.toFixed(2) + "×" : "—"; }
  function fmtPct(v) { return finite(v) ? v.toFixed(1) + "%" : "—"; }
  function fmtCount(v) {
    if (!finite(v)) return "—";
    var units = [[1e9, "G"], [1e6, "M"], [1e3, "k"]];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(v) >= units[i][0]) return Number((v / units[i][0]).toPrecision(3)) + units[i][1];
    }
    return v.toFixed(0);
  }
  function fmtUsd(v) { return !finite(v) ? "—" : (v >= 0.01 || v === 0) ? "$" + v.toFixed(2) : "$" + v.toFixed(4); }
  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // -- attempts table ---------------------------------------------------------------------------
  function td(text, cls) { return el("td", cls ? { "class": cls } : {}, text); }
  function renderRow(a) {
    var tr = el("tr", { id: "attempt-" + a.n, "data-n": String(a.n) });
    if (a.n === bestN) tr.className = "best";
    tr.appendChild(td(String(a.n), "num"));
    tr.appendChild(td(a.trajectory_id === null || a.trajectory_id === undefined ? "—" : String(a.trajectory_id)));
    tr.appendChild(td(a.tool || ""));
    var status = td("");
    status.appendChild(el("span", { "class": "badge status-" + a.status }, a.status));
    tr.appendChild(status);
    tr.appendChild(td(a.stage || ""));
    tr.appendChild(td(fmtMs(a.median_ms), "num"));
    tr.appendChild(td(fmtX(a.speedup_vs_eager), "num"));
    tr.appendChild(td(fmtX(a.speedup_vs_compile), "num"));
    tr.appendChild(td(fmtPct(a.pct_of_sol), "num"));
    var message = a.message || "";
    var msg = td(message.slice(0, 160), "msg");
    msg.title = message;
    tr.appendChild(msg);
    return tr;
  }
  function upsertRow(a) {
    var tbody = document.querySelector("#attempts tbody");
    var existing = document.getElementById("attempt-" + a.n);
    var row = renderRow(a);
    if (existing) { tbody.replaceChild(row, existing); return; }
    var after = null;
    Array.prototype.forEach.call(tbody.rows, function (r) {
      if (Number(r.getAttribute("data-n")) > a.n && after === null) after = r;
    });
    tbody.insertBefore(row, after);
    row.classList.add("fresh");
  }
  function markBest(n) {
    bestN = n;
    Array.prototype.forEach.call(document.querySelectorAll("#attempts tbody tr"), function (r) {
      r.classList.toggle("best", Number(r.getAttribute("data-n")) === n);
    });
  }

  // -- chart ----------------------------------------------------------------------------------------
  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function drawChart() {
    var chart = document.getElementById("chart");
    if (!chart) return;
    while (chart.firstChild) chart.removeChild(chart.firstChild);
    var W = 860, H = 280, L = 56, R = 150, T = 16, B = 34;
    var list = Array.from(attempts.values()).sort(function (a, b) { return a.n - b.n; });
    var timed = list.filter(function (a) { return finite(a.speedup_vs_eager) && a.speedup_vs_eager > 0; });
    var values = timed.map(function (a) { return a.speedup_vs_eager; }).concat([1]);
    if (finite(compileLine) && compileLine > 0) values.push(compileLine);
    var lo = Math.min.apply(null, values), hi = Math.max.apply(null, values);
    var ymin = Math.log2(Math.min(lo / 1.25, 0.5)), ymax = Math.log2(Math.max(hi * 1.25, 2));
    var nmax = Math.max(5, list.length ? list[list.length - 1].n : 0);
    function x(n) { return L + (W - L - R) * (nmax <= 1 ? 0.5 : (n - 1) / (nmax - 1)); }
    function y(v) { return T + (H - T - B) * (1 - (Math.log2(v) - ymin) / (ymax - ymin)); }
    chart.appendChild(svg("rect", { x: L, y: T, width: W - L - R, height: H - T - B, "class": "plot" }));
    for (var e = Math.ceil(ymin); e <= Math.floor(ymax); e++) {
      var v = Math.pow(2, e);
      chart.appendChild(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), "class": "grid" }));
      chart.appendChild(svg("text", { x: L - 6, y: y(v) + 4, "class": "tick", "text-anchor": "end" },
        (v >= 1 ? v : v.toPrecision(2)) + "×"));
    }
    var step = Math.max(1, Math.ceil(nmax / 12));
    for (var n = 1; n <= nmax; n += step) {
      chart.appendChild(svg("text", { x: x(n), y: H - B + 16, "class": "tick", "text-anchor": "middle" }, String(n)));
    }
    chart.appendChild(svg("text", { x: L + (W - L - R) / 2, y: H - 4, "class": "axis", "text-anchor": "middle" },
      "attempt"));
    function hline(value, cls, label) {
      chart.appendChild(svg("line", { x1: L, x2: W - R, y1: y(value), y2: y(value), "class": cls }));
      chart.appendChild(svg("text", { x: W - R + 6, y: y(value) + 4, "class": cls + "-label" }, label));
    }
    hline(1, "line-eager", "eager 1×");
    if (finite(compileLine) && compileLine > 0) hline(compileLine, "line-compile", "torch.compile " + fmtX(compileLine));
    var best = null, path = [];
    timed.forEach(function (a) {
      if (a.status === "pass" && (best === null || a.speedup_vs_eager > best)) best = a.speedup_vs_eager;
      if (best !== null) path.push(x(a.n).toFixed(1) + "," + y(best).toFixed(1));
    });
    if (path.length > 1) chart.appendChild(svg("polyline", { points: path.join(" "), "class": "best-line" }));
    list.forEach(function (a) {
      var title = "attempt " + a.n + ": " + a.status + (finite(a.speedup_vs_eager) ? ", " + fmtX(a.speedup_vs_eager) +
        " vs eager, " + fmtX(a.speedup_vs_compile) + " vs torch.compile" : "");
      var mark;
      if (finite(a.speedup_vs_eager) && a.speedup_vs_eager > 0) {
        mark = svg("circle", { cx: x(a.n), cy: y(a.speedup_vs_eager), r: a.n === bestN ? 6 : 4.5,
          "class": "pt status-" + a.status + (a.n === bestN ? " best" : ""), "data-n": String(a.n) });
      } else {
        mark = svg("path", { d: "M" + (x(a.n) - 4) + "," + (H - B - 8) + "l8,8m0,-8l-8,8",
          "class": "miss status-" + a.status, "data-n": String(a.n) });
      }
      mark.appendChild(svg("title", {}, title));
      chart.appendChild(mark);
    });
    chart.setAttribute("data-points", String(timed.length));
  }

  // -- summary --------------------------------------------------------------------------------------
  function setText(id, text) { var node = document.getElementById(id); if (node) node.textContent = text; }
  function setState(state) {
    data.state = state;
    var badge = document.getElementById("job-state");
    if (badge) { badge.textContent = state; badge.className = "badge state-" + state; }
    if (state !== "queued" && state !== "running") {
      var cancel = document.getElementById("cancel-job");
      if (cancel) cancel.remove();
    }
  }
  function setBudget(id, used, limit, text) {
    var node = document.getElementById("budget-" + id);
    if (!node) return;
    node.querySelector(".muted").textContent = text;
    var width = finite(limit) && limit > 0 ? Math.min(100, 100 * used / limit) : 0;
    node.querySelector(".bar div").style.width = width.toFixed(1) + "%";
  }
  var refreshing = null;
  function refreshJob() {
    if (refreshing) return refreshing;
    refreshing = fetch("/jobs/" + jobId, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (job) {
        refreshing = null;
        if (!job) return;
        setState(job.state);
        setText("attempts-count", String(job.attempts_count));
        var best = job.best;
        setText("best-eager", fmtX(best && best.speedup_vs_eager));
        setText("best-compile", fmtX(best && best.speedup_vs_compile));
        setText("best-ms", best && finite(best.median_ms) ? fmtMs(best.median_ms) + " ms" : "—");
        var budgets = job.budgets || {};
        var tokens = (job.tokens_in || 0) + (job.tokens_out || 0);
        setBudget("tokens", tokens, budgets.max_tokens,
          budgets.max_tokens ? fmtCount(tokens) + " of " + fmtCount(budgets.max_tokens) : fmtCount(tokens));
        setBudget("cost", job.cost_usd || 0, budgets.max_cost_usd,
          budgets.max_cost_usd ? fmtUsd(job.cost_usd) + " of " + fmtUsd(budgets.max_cost_usd) : fmtUsd(job.cost_usd));
        if (best && best.n !== bestN) { markBest(best.n); loadBest(best); drawChart(); }
      })
      .catch(function () { refreshing = null; });
    return refreshing;
  }
  function loadBest(best) {
    fetch("/dashboard/jobs/" + jobId + "/best.html", { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (fragment) {
        if (fragment === null) return;
        document.getElementById("best-source").innerHTML = fragment;  // server-escaped, highlighted
        setText("best-label", "attempt " + best.n + " · " + fmtMs(best.median_ms) + " ms · " + fmtX(best.speedup_vs_eager));
        var download = document.getElementById("download-best");
        if (download) download.classList.remove("disabled");
      });
  }
  function enrich(n) {
    // The event carries the figures; the stored row adds the message.
    fetch("/jobs/" + jobId + "/attempts?after=" + (n - 1) + "&limit=1", { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (page) {
        if (!page || !page.items.length || page.items[0].n !== n) return;
        var a = page.items[0];
        attempts.set(n, Object.assign({}, attempts.get(n) || {}, a));
        upsertRow(attempts.get(n));
      });
  }

  // -- live -------------------------------------------------------------------------------------------
  var live = document.getElementById("live");
  function setLive(on, title) { if (live) { live.classList.toggle("on", on); live.title = title; } }
  function onAttempt(event) {
    var a = JSON.parse(event.data);
    var seen = attempts.has(a.n);
    attempts.set(a.n, Object.assign({}, attempts.get(a.n) || {}, a));
    if (a.best) markBest(a.n);
    upsertRow(attempts.get(a.n));
    drawChart();
    if (!seen) enrich(a.n);
    if (a.best) loadBest(a);
    refreshJob();
  }
  drawChart();
  var cancel = document.getElementById("cancel-job");
  if (cancel) {
    cancel.addEventListener("click", function () {
      cancel.disabled = true;
      fetch(cancel.getAttribute("data-url"), { method: "POST", credentials: "same-origin",
        headers: { "X-CSRF-Token": csrf, Accept: "application/json" } })
        .then(function () { refreshJob(); });
    });
  }
  if (data.state !== "queued" && data.state !== "running") { setLive(false, "finished"); return; }
  if (!window.EventSource) return;
  var source = new EventSource("/jobs/" + jobId + "/events?after=" + data.last_event_id);
  source.onopen = function () { setLive(true, "live"); };
  source.onerror = function () { setLive(false, "reconnecting…"); };
  source.addEventListener("attempt", onAttempt);
  source.addEventListener("state", function (event) { setState(JSON.parse(event.data).state); refreshJob(); });
  source.addEventListener("cancel_requested", function () { refreshJob(); });
  source.addEventListener("end", function () { source.close(); setLive(false, "finished"); refreshJob(); });
  // Leaving the page closes the stream (a page kept in the back/forward cache would hold it open);
  // coming back to a cached page reloads it, so it resumes from what is stored.
  window.addEventListener("pagehide", function () { source.close(); });
  window.addEventListener("pageshow", function (event) { if (event.persisted) window.location.reload(); });
})();

// kernelloop dashboard: the job page's live attempts table, speedup chart, agent timeline and
// "now" panel. Plain JavaScript, no build step, nothing from another site. Data: the page's
// <script id="job-data"> JSON (with the job's recent events, replayed here), then the job's
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
  var trajectories = new Map();
  (data.trajectories || []).forEach(function (t) { trajectories.set(t.id, t); });
  var compileLine = data.compile_line;
  var bestN = data.best_n;
  var SVG = "http://www.w3.org/2000/svg";
  // The server's clock minus ours: elapsed times are measured from the worker's timestamps.
  var clockSkewMs = data.server_now ? Date.parse(data.server_now) - Date.now() : 0;
  function serverNow() { return Date.now() + clockSkewMs; }

  // -- formatting (as api/dashboard/pages.py) -------------------------------------------------
  function finite(v) { return typeof v === "number" && isFinite(v); }
  function fmtMs(v) {
    if (!finite(v)) return "—";
    if (v >= 1) return v.toFixed(3);
    var r = Number(v.toPrecision(3));  // three significant digits, never an exponent
    if (r === 0 || Math.abs(r) >= 1e-6) return r.toString();
    return r.toFixed(2 - Math.floor(Math.log10(Math.abs(r)))).replace(/0+$/, "");
  }
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
  function fmtSeconds(v) {
    if (!finite(v)) return "—";
    if (v < 60) return v.toFixed(1) + " s";
    var total = Math.round(v), m = Math.floor(total / 60), s = total % 60;
    return m + " min " + (s < 10 ? "0" : "") + s + " s";
  }
  function fmtClock(date) {
    function two(n) { return (n < 10 ? "0" : "") + n; }
    return two(date.getUTCHours()) + ":" + two(date.getUTCMinutes()) + ":" + two(date.getUTCSeconds());
  }
  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function trajectoryIndex(id) {
    var t = id === null || id === undefined ? null : trajectories.get(id);
    return t ? t.index : null;
  }

  // -- chart marks (as api/dashboard/views.py mark_kind) ----------------------------------------
  function markKind(a) {
    if (finite(a.speedup_vs_eager) && a.speedup_vs_eager > 0) return "timed";
    if (a.status === "pass" || a.status === "suspicious") return "untimed";
    return "failed";
  }

  // -- attempts table ---------------------------------------------------------------------------
  function td(text, cls) { return el("td", cls ? { "class": cls } : {}, text); }
  function renderRow(a) {
    var tr = el("tr", { id: "attempt-" + a.n, "data-n": String(a.n) });
    if (a.n === bestN) tr.className = "best";
    var pick = td("", "pick");
    var box = el("input", { type: "checkbox", name: "n", value: String(a.n), "aria-label": "compare attempt " + a.n });
    var existing = document.querySelector('#attempts input[name="n"][value="' + a.n + '"]');
    if (existing && existing.checked) box.checked = true;
    pick.appendChild(box);
    tr.appendChild(pick);
    var num = td("", "num");
    num.appendChild(el("a", { href: "/dashboard/jobs/" + jobId + "/attempts/" + a.n }, String(a.n)));
    tr.appendChild(num);
    var index = trajectoryIndex(a.trajectory_id);
    tr.appendChild(td(index === null ? "—" : String(index)));
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
    var placeholder = tbody.querySelector("tr.empty");
    if (placeholder) placeholder.remove();
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

  // -- chart: one series per trajectory; untimed passes and failures in lanes below -----------------
  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function seriesKey(a) { var i = trajectoryIndex(a.trajectory_id); return i === null ? "job" : "t" + i; }
  function seriesClass(key) { return key === "job" ? "series-job" : "series-" + (Number(key.slice(1)) % 8); }
  function seriesLabel(key) {
    if (key === "job") return "job (no trajectory)";
    var index = Number(key.slice(1)), label = "trajectory " + index;
    trajectories.forEach(function (t) { if (t.index === index) label = t.label; });
    return label;
  }
  function drawChart() {
    var chart = document.getElementById("chart");
    if (!chart) return;
    while (chart.firstChild) chart.removeChild(chart.firstChild);
    var W = 860, H = 300, L = 64, R = 130, T = 14, laneH = 20, gap = 10, B = 30 + gap + 2 * laneH;
    var plotBottom = H - B, lanesTop = plotBottom + gap;
    var laneUntimed = lanesTop + laneH / 2, laneFailed = lanesTop + 1.5 * laneH;
    var list = Array.from(attempts.values()).sort(function (a, b) { return a.n - b.n; });
    var timed = list.filter(function (a) { return markKind(a) === "timed"; });
    var values = timed.map(function (a) { return a.speedup_vs_eager; }).concat([1]);
    if (finite(compileLine) && compileLine > 0) values.push(compileLine);
    var lo = Math.min.apply(null, values), hi = Math.max.apply(null, values);
    var ymin = Math.log2(Math.min(lo / 1.25, 0.5)), ymax = Math.log2(Math.max(hi * 1.25, 2));
    var nmax = Math.max(5, list.length ? list[list.length - 1].n : 0);
    function x(n) { return L + (W - L - R) * (nmax <= 1 ? 0.5 : (n - 1) / (nmax - 1)); }
    function y(v) { return T + (plotBottom - T) * (1 - (Math.log2(v) - ymin) / (ymax - ymin)); }
    chart.appendChild(svg("rect", { x: L, y: T, width: W - L - R, height: plotBottom - T, "class": "plot" }));
    chart.appendChild(svg("rect", { x: L, y: lanesTop, width: W - L - R, height: 2 * laneH, "class": "lanes" }));
    chart.appendChild(svg("line", { x1: L, x2: W - R, y1: lanesTop + laneH, y2: lanesTop + laneH, "class": "grid" }));
    chart.appendChild(svg("text", { x: L - 6, y: laneUntimed + 4, "class": "tick", "text-anchor": "end" }, "untimed"));
    chart.appendChild(svg("text", { x: L - 6, y: laneFailed + 4, "class": "tick", "text-anchor": "end" }, "failed"));
    for (var e = Math.ceil(ymin); e <= Math.floor(ymax); e++) {
      var v = Math.pow(2, e);
      chart.appendChild(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), "class": "grid" }));
      chart.appendChild(svg("text", { x: L - 6, y: y(v) + 4, "class": "tick", "text-anchor": "end" },
        (v >= 1 ? v : v.toPrecision(2)) + "×"));
    }
    var step = Math.max(1, Math.ceil(nmax / 12));
    for (var n = 1; n <= nmax; n += step) {
      chart.appendChild(svg("text", { x: x(n), y: H - 14, "class": "tick", "text-anchor": "middle" }, String(n)));
    }
    chart.appendChild(svg("text", { x: L + (W - L - R) / 2, y: H - 2, "class": "axis", "text-anchor": "middle" },
      "attempt"));
    function hline(value, cls, label) {
      chart.appendChild(svg("line", { x1: L, x2: W - R, y1: y(value), y2: y(value), "class": cls }));
      chart.appendChild(svg("text", { x: W - R + 6, y: y(value) + 4, "class": cls + "-label" }, label));
    }
    hline(1, "line-eager", "eager 1×");
    if (finite(compileLine) && compileLine > 0) hline(compileLine, "line-compile", "torch.compile " + fmtX(compileLine));
    // The best verified speedup so far, across trajectories.
    // A step line: it rises at the attempt that beat it and stays level until the next one.
    var best = null, path = [];
    timed.forEach(function (a) {
      if (a.status === "pass" && (best === null || a.speedup_vs_eager > best)) {
        if (best !== null) path.push(x(a.n).toFixed(1) + "," + y(best).toFixed(1));
        best = a.speedup_vs_eager;
        path.push(x(a.n).toFixed(1) + "," + y(best).toFixed(1));
      }
    });
    if (best !== null && list.length) path.push(x(list[list.length - 1].n).toFixed(1) + "," + y(best).toFixed(1));
    if (path.length > 1) chart.appendChild(svg("polyline", { points: path.join(" "), "class": "best-line" }));
    // Each trajectory's timed attempts joined in order.
    var series = new Map();
    list.forEach(function (a) {
      var key = seriesKey(a);
      if (!series.has(key)) series.set(key, []);
      series.get(key).push(a);
    });
    series.forEach(function (members, key) {
      var pts = members.filter(function (a) { return markKind(a) === "timed"; })
        .map(function (a) { return x(a.n).toFixed(1) + "," + y(a.speedup_vs_eager).toFixed(1); });
      if (pts.length > 1) {
        chart.appendChild(svg("polyline", { points: pts.join(" "), "class": "series-line " + seriesClass(key) }));
      }
    });
    list.forEach(function (a) {
      var kind = markKind(a), key = seriesKey(a), cls = seriesClass(key);
      var title = "attempt " + a.n + " (" + seriesLabel(key) + ", " + (a.tool || "?") + "): " + a.status +
        (kind === "timed" ? ", " + fmtX(a.speedup_vs_eager) + " vs eager, " + fmtX(a.speedup_vs_compile) +
          " vs torch.compile" : kind === "untimed" ? ", passed, not timed" : "");
      var mark, cx = x(a.n);
      if (kind === "timed") {
        mark = svg("circle", { cx: cx, cy: y(a.speedup_vs_eager), r: a.n === bestN ? 6.5 : 4.5,
          "class": "pt " + cls + " status-" + a.status + (a.n === bestN ? " best" : ""), "data-n": String(a.n) });
      } else if (kind === "untimed") {
        mark = svg("path", { d: "M" + cx + "," + (laneUntimed - 5) + "l5,5l-5,5l-5,-5z",
          "class": "untimed " + cls, "data-n": String(a.n) });
      } else {
        mark = svg("path", { d: "M" + (cx - 4) + "," + (laneFailed - 4) + "l8,8m0,-8l-8,8",
          "class": "miss status-" + a.status, "data-n": String(a.n) });
      }
      mark.appendChild(svg("title", {}, title));
      var link = svg("a", { href: "/dashboard/jobs/" + jobId + "/attempts/" + a.n });
      link.appendChild(mark);
      chart.appendChild(link);
    });
    // Legend (HTML, under the chart): the series, then the marks.
    var legendNode = document.getElementById("chart-legend");
    if (legendNode) {
      while (legendNode.firstChild) legendNode.removeChild(legendNode.firstChild);
      series.forEach(function (members, key) {
        var item = el("span", { "class": "item", "data-series": key });
        item.appendChild(el("span", { "class": "swatch dot " + seriesClass(key) }));
        item.appendChild(document.createTextNode(seriesLabel(key)));
        legendNode.appendChild(item);
      });
      [["swatch diamond", "passed, not timed (compile, check, profile)"], ["swatch cross", "failed"],
        ["swatch bestline", "best so far"]].forEach(function (entry) {
        var item = el("span", { "class": "item" });
        item.appendChild(el("span", { "class": entry[0] }, entry[0] === "swatch cross" ? "×" : ""));
        item.appendChild(document.createTextNode(entry[1]));
        legendNode.appendChild(item);
      });
    }
    chart.setAttribute("data-points", String(timed.length));
    chart.setAttribute("data-series", String(series.size));
  }

  // -- comparing two attempts: the ticks of the attempts table (a form that works without us) -----
  var picked = [];
  function syncPicks() {
    picked = picked.filter(function (n) {
      var box = document.querySelector('#attempts input[name="n"][value="' + n + '"]');
      return box && box.checked;
    });
    var button = document.getElementById("compare-button");
    if (!button) return;
    var sorted = picked.slice().sort(function (a, b) { return a - b; });
    button.disabled = sorted.length !== 2;
    button.textContent = sorted.length === 2 ? "Compare " + sorted[0] + " ↔ " + sorted[1] :
      sorted.length === 1 ? "Tick one more to compare with " + sorted[0] : "Compare two attempts";
  }
  var attemptsTable = document.getElementById("attempts");
  if (attemptsTable) {
    attemptsTable.addEventListener("change", function (event) {
      var box = event.target;
      if (!box || box.name !== "n") return;
      var n = Number(box.value);
      if (box.checked) {
        picked.push(n);
        while (picked.length > 2) {  // the oldest tick gives way
          var first = document.querySelector('#attempts input[name="n"][value="' + picked.shift() + '"]');
          if (first) first.checked = false;
        }
      } else {
        picked = picked.filter(function (p) { return p !== n; });
      }
      syncPicks();
    });
    // Ticks the browser kept (back to this page) count too.
    picked = Array.prototype.map.call(attemptsTable.querySelectorAll('input[name="n"]:checked'),
      function (box) { return Number(box.value); });
    syncPicks();
  }

  // -- the charts the server draws (roofline, usage) and the time to verdict, fetched again as the job moves
  var chartsTimer = null, chartsLast = 0;
  var CHARTS_EVERY_MS = 2000;
  function refreshCharts() {
    if (chartsTimer) return;
    var wait = Math.max(0, chartsLast + CHARTS_EVERY_MS - Date.now());
    chartsTimer = window.setTimeout(function () {
      chartsTimer = null;
      chartsLast = Date.now();
      [["charts.html", "job-charts"], ["timings.html", "job-timings"]].forEach(function (part) {
        fetch("/dashboard/jobs/" + jobId + "/" + part[0], { credentials: "same-origin" })
          .then(function (r) { return r.ok ? r.text() : null; })
          .then(function (fragment) {
            var node = document.getElementById(part[1]);
            if (fragment !== null && node) node.innerHTML = fragment;  // server-rendered and escaped
          });
      });
    }, wait);
  }
  // Eager's and torch.compile's milliseconds, from a timed attempt (speedup = baseline / median).
  function setBaselines(a) {
    if (!finite(a.median_ms)) return;
    if (finite(a.speedup_vs_eager)) setText("eager-ms", fmtMs(a.median_ms * a.speedup_vs_eager) + " ms");
    if (finite(a.speedup_vs_compile)) setText("compile-ms", fmtMs(a.median_ms * a.speedup_vs_compile) + " ms");
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
      setNow(null);
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

  // -- the agent's timeline -------------------------------------------------------------------------
  var timelineNode = document.getElementById("timeline");
  function trajectoryChip(index) {
    return index === null || index === undefined ? null : el("span", { "class": "traj traj-" + (index % 8) }, "t" + index);
  }
  function appendTimeline(item) {
    if (!timelineNode) return;
    var empty = timelineNode.querySelector(".empty");
    if (empty) empty.remove();
    var nearBottom = timelineNode.scrollHeight - timelineNode.scrollTop - timelineNode.clientHeight < 40;
    timelineNode.appendChild(item);
    item.classList.add("fresh");
    if (nearBottom) timelineNode.scrollTop = timelineNode.scrollHeight;
  }
  function timelineMessage(m, at) {
    var li = el("li", { "class": "tl tl-message role-" + m.role });
    var head = el("div", { "class": "tl-head" });
    head.appendChild(el("span", { "class": "tl-time" }, fmtClock(at)));
    var chip = trajectoryChip(m.trajectory);
    if (chip) head.appendChild(chip);
    head.appendChild(el("span", { "class": "role" }, m.role));
    (m.tool_calls || []).forEach(function (name) { head.appendChild(el("span", { "class": "call" }, "→ " + name)); });
    var tokens = (m.tokens_in || 0) + (m.tokens_out || 0);
    if (tokens) {
      head.appendChild(el("span", { "class": "muted small" },
        fmtCount(tokens) + " tok" + (finite(m.latency_ms) ? " · " + fmtSeconds(m.latency_ms / 1000) : "")));
    }
    li.appendChild(head);
    if (m.preview) {
      var details = el("details");
      details.appendChild(el("summary", {}, m.preview.replace(/\s+/g, " ")));
      details.appendChild(el("pre", { "class": "msg-body" }, m.preview + (m.preview.length >= 240 ?
        "\n… (the whole message is at /jobs/" + jobId + "/messages)" : "")));
      li.appendChild(details);
    }
    return li;
  }
  function timelineAttempt(a, at) {
    var li = el("li", { "class": "tl tl-attempt", "data-n": String(a.n) });
    var head = el("div", { "class": "tl-head" });
    head.appendChild(el("span", { "class": "tl-time" }, fmtClock(at)));
    var chip = trajectoryChip(trajectoryIndex(a.trajectory_id));
    if (chip) head.appendChild(chip);
    head.appendChild(el("a", { href: "/dashboard/jobs/" + jobId + "/attempts/" + a.n }, "attempt " + a.n));
    head.appendChild(document.createTextNode(" "));
    head.appendChild(el("span", { "class": "muted" }, a.tool || ""));
    head.appendChild(document.createTextNode(" "));
    head.appendChild(el("span", { "class": "badge status-" + a.status }, a.status));
    if (finite(a.speedup_vs_eager)) { head.appendChild(document.createTextNode(" ")); head.appendChild(el("b", {}, fmtX(a.speedup_vs_eager))); }
    li.appendChild(head);
    return li;
  }

  // -- what the worker is doing now ---------------------------------------------------------------------
  // Stage events ({"stage", "phase": "started"|"finished", "seconds", "at"?, "attempt"?, "trajectory"?})
  // come from the referee; progress, message, trajectory and attempt events say the rest.
  var STAGES = {
    header_build: "building the torch headers (precompiled, once per cache)",
    reference_start: "starting the reference (problem, expected outputs)",
    baselines: "timing eager PyTorch and torch.compile",
    compile: "compiling the candidate",
    load: "loading the candidate",
    correctness: "checking correctness",
    timing: "timing the candidate"
  };
  var PROGRESS = {
    started: "the worker started the job",
    evaluating: "evaluating the candidate",
    infra_retry: "retrying after an infrastructure error",
    retime: "re-timing a quarantined kernel with fresh seeds"
  };
  var now = { text: null, since: null, steps: [] };
  var nowTimer = null;
  function stageLabel(stage) { return STAGES[stage] || String(stage).replace(/_/g, " "); }
  function whose(d) {
    var parts = [];
    if (d.trajectory !== undefined && d.trajectory !== null) parts.push("trajectory " + d.trajectory);
    if (d.attempt !== undefined && d.attempt !== null) parts.push("attempt " + d.attempt);
    return parts.length ? " (" + parts.join(", ") + ")" : "";
  }
  function renderNow() {
    var panel = document.getElementById("now");
    if (!panel) return;
    if (now.text === null) { panel.classList.add("hidden"); return; }
    panel.classList.remove("hidden");
    setText("now-text", now.text);
    var elapsed = now.since === null ? "" : fmtSeconds(Math.max(0, (serverNow() - now.since) / 1000));
    setText("now-elapsed", elapsed);
    var list = document.getElementById("now-steps");
    while (list.firstChild) list.removeChild(list.firstChild);
    now.steps.forEach(function (s) {
      var li = el("li", { "class": "step " + (s.done ? "done" : "running"), "data-stage": s.stage });
      li.appendChild(el("span", { "class": "name" }, stageLabel(s.stage)));
      li.appendChild(el("span", { "class": "secs" },
        s.done ? fmtSeconds(s.seconds) : fmtSeconds(Math.max(0, (serverNow() - s.since) / 1000)) + " …"));
      list.appendChild(li);
    });
  }
  function setNow(text, since) {
    now.text = text;
    now.since = text === null ? null : (since === undefined ? null : since);
    if (text === null) now.steps = [];
    renderNow();
    if (text !== null && !nowTimer) nowTimer = window.setInterval(renderNow, 1000);
    if (text === null && nowTimer) { window.clearInterval(nowTimer); nowTimer = null; }
  }
  function onStage(d, at) {
    var stage = String(d.stage || "?");
    if (d.phase === "started") {
      now.steps = now.steps.filter(function (s) { return s.done || s.stage !== stage; });
      now.steps.push({ stage: stage, done: false, since: at });
      setNow(stageLabel(stage) + whose(d), at);
    } else {
      var found = false;
      now.steps.forEach(function (s) {
        if (s.stage === stage && !s.done) { s.done = true; s.seconds = d.seconds; found = true; }
      });
      if (!found) now.steps.push({ stage: stage, done: true, seconds: d.seconds, since: at });
      setNow(stageLabel(stage) + " done in " + fmtSeconds(d.seconds) + whose(d), null);
    }
  }
  // One stored or live event, in order: `at` is when it was stored (ms since the epoch).
  function apply(type, d, at, live) {
    if (type === "stage") { onStage(d, at); return; }
    if (type === "progress") {
      setNow((PROGRESS[d.phase] || String(d.phase)) + (d.message ? ": " + d.message : ""), at);
      return;
    }
    if (type === "message") {
      if (live) appendTimeline(timelineMessage(d, new Date(at)));
      if (d.role === "assistant") {
        var calls = d.tool_calls || [];
        setNow(calls.length ? "running " + calls.join(", ") + whose({ trajectory: d.trajectory }) :
          "the model answered" + whose({ trajectory: d.trajectory }), at);
      } else {
        setNow("waiting for the model" + whose({ trajectory: d.trajectory }), at);
      }
      return;
    }
    if (type === "trajectory") {
      if (d.state === "running") setNow("trajectory " + d.index + " started", at);
      else setNow("trajectory " + d.index + " ended: " + (d.reason || d.state), null);
      return;
    }
    if (type === "attempt") {
      // The attempt's steps are over: the next ones start a new list.
      now.steps = [];
      setNow("attempt " + d.n + " judged: " + d.status + (finite(d.speedup_vs_eager) ? ", " + fmtX(d.speedup_vs_eager) : ""), null);
      return;
    }
    if (type === "state") {
      if (d.state === "queued") setNow("waiting for a worker", at);
      else if (d.state === "running") setNow("the worker started the job", at);
      else setNow(null);
    }
  }
  function eventTime(d, fallback) {
    var t = d && d.at ? Date.parse(d.at) : NaN;
    return isFinite(t) ? t : fallback;
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
    syncPicks();
    drawChart();
    setBaselines(a);
    refreshCharts();
    if (!seen) { enrich(a.n); appendTimeline(timelineAttempt(a, new Date(serverNow()))); }
    if (a.best) loadBest(a);
    apply("attempt", a, serverNow(), true);
    refreshJob();
  }
  function onTrajectory(d) {
    if (d.trajectory_id !== undefined && !trajectories.has(d.trajectory_id)) {
      trajectories.set(d.trajectory_id, { id: d.trajectory_id, index: d.index, state: d.state, label: "trajectory " + d.index });
      drawChart();
    }
  }
  drawChart();
  if (data.state === "queued" || data.state === "running") {
    setNow(data.state === "queued" ? "waiting for a worker" : "working", null);
    (data.recent_events || []).forEach(function (e) {
      if (e.type === "trajectory") onTrajectory(e.data);
      apply(e.type, e.data, eventTime(e.data, Date.parse(e.at)), false);
    });
  }
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
  source.addEventListener("state", function (event) {
    var d = JSON.parse(event.data);
    setState(d.state);
    apply("state", d, serverNow(), true);
    refreshJob();
    refreshCharts();  // the time to verdict's queue wait, once claimed
  });
  ["stage", "progress", "message", "trajectory"].forEach(function (type) {
    source.addEventListener(type, function (event) {
      var d = JSON.parse(event.data);
      if (type === "trajectory") onTrajectory(d);
      apply(type, d, eventTime(d, serverNow()), true);
      if (type === "message") { refreshJob(); refreshCharts(); }
    });
  });
  source.addEventListener("cancel_requested", function () { setNow("cancelling at the next safe point", serverNow()); refreshJob(); });
  source.addEventListener("end", function () { source.close(); setLive(false, "finished"); refreshJob(); refreshCharts(); });
  // Leaving the page closes the stream (a page kept in the back/forward cache would hold it open);
  // coming back to a cached page reloads it, so it resumes from what is stored.
  window.addEventListener("pagehide", function () { source.close(); });
  window.addEventListener("pageshow", function (event) { if (event.persisted) window.location.reload(); });
})();

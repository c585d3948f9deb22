/* opconform report: the case tables (filter, sort, paginate, per-row repro command), matrix cells that
   jump to a filtered case table, and copy buttons. Row layout: harness/report/ops.py table_data. */
(function () {
  "use strict";
  var PAGE = 50;
  var C = {backend: 0, dtype: 1, kase: 2, check: 3, status: 4, failure: 5, abs: 6, rel: 7, ulp: 8,
           budget: 9, tol: 10, source: 11, detail: 12, note: 13, tier: 14};
  var NUMERIC = {6: true, 7: true, 8: true, 9: true};
  // Sort rank per status, worst first, and the rank of a status this report does not know: filled in by
  // harness/report/render.py from harness/report/status.py (js_rank), which reads harness/core/status.py.
  var RANK = __STATUS_RANK__, UNKNOWN_RANK = __UNKNOWN_RANK__;

  function num(v) {
    if (v === null || v === undefined || v === "") return null;
    if (typeof v === "number") return v;
    if (v === "inf") return Infinity;
    if (v === "-inf") return -Infinity;
    if (v === "nan") return NaN;
    var x = parseFloat(v);
    return isNaN(x) ? null : x;
  }
  function fmt(v) {
    var x = num(v);
    if (x === null) return "—";
    if (!isFinite(x)) return String(v);
    if (x === 0) return "0";
    var a = Math.abs(x);
    return (a >= 1e4 || a < 1e-3) ? x.toExponential(2) : String(parseFloat(x.toPrecision(3)));
  }
  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }
  // The same command harness/report/repro.py builds: shlex.join of the argv, fnmatch specials escaped.
  function shq(s) {
    if (s === "") return "''";
    return /^[\w@%+=:,.\/-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\"'\"'") + "'";
  }
  function globEscape(s) { return s.replace(/[*?[]/g, function (c) { return "[" + c + "]"; }); }
  function reproCommand(op, row, flags) {
    var argv = ["opconform", "run", "--ops", globEscape(op), "--backends", row[C.backend],
                "--cases", globEscape(row[C.dtype] + "-" + row[C.kase])];
    if (row[C.tier] === "nightly") argv.push("--tier", "nightly");
    return argv.concat(flags).map(shq).join(" ");
  }

  // Max rel and ULP of a passing result whose reference is near zero where they are largest (ops.py
  // near_zero): not shown as figures, since the absolute tolerance decided that element's verdict.
  var NEAR_ZERO = "near0";
  function relative(r) {
    if (r[C.rel] !== NEAR_ZERO) return '<td class="n">' + fmt(r[C.rel]) + '</td><td class="n">' + fmt(r[C.ulp]) + "</td>";
    var why = "Where the relative error is largest the reference is near zero (|ref| < atol / rtol): the value passed " +
      "on the absolute tolerance, so its relative error and ULP distance say nothing. What decided the verdict: " +
      "max abs err " + fmt(r[C.abs]) + (r[C.tol] ? " within " + r[C.tol] : "") + ".";
    return '<td class="n na near0" title="' + esc(why) + '">—</td><td class="n na near0" title="' + esc(why) + '">—</td>';
  }

  function CaseTable(root) {
    var data = JSON.parse(document.getElementById(root.getAttribute("data-src")).textContent);
    this.root = root;
    this.op = root.getAttribute("data-op");
    this.rows = data.rows;
    this.index = new Map(this.rows.map(function (r, i) { return [r, i]; }));
    this.flags = data.flags || [];
    this.view = this.rows.slice();
    this.page = 0;
    this.sortCol = null;
    this.sortDir = 1;
    this.open = {};
    this.tbody = root.querySelector("tbody");
    this.apply();
  }
  CaseTable.prototype.toggle = function (i) {
    this.open[i] = !this.open[i];
    this.draw();
  };
  CaseTable.prototype.value = function (cls) {
    var el = this.root.querySelector("." + cls);
    return el ? el.value : "";
  };
  CaseTable.prototype.set = function (cls, v) {
    var el = this.root.querySelector("." + cls);
    if (el) el.value = v;
  };
  CaseTable.prototype.apply = function () {
    var text = this.value("f-text").toLowerCase(), status = this.value("f-status"),
        backend = this.value("f-backend"), dtype = this.value("f-dtype"), check = this.value("f-check");
    this.view = this.rows.filter(function (r) {
      if (status === "!pass" ? r[C.status] === "pass" : (status && r[C.status] !== status)) return false;
      if (backend && r[C.backend] !== backend) return false;
      if (dtype && r[C.dtype] !== dtype) return false;
      if (check && r[C.check] !== check) return false;
      if (text) {
        var hay = (r[C.dtype] + "-" + r[C.kase] + " " + r[C.check] + " " + r[C.detail] + " " + r[C.note] + " " +
                   r[C.failure] + " " + r[C.source]).toLowerCase();
        if (hay.indexOf(text) < 0) return false;
      }
      return true;
    });
    if (this.sortCol !== null) this.order();
    this.page = 0;
    this.draw();
  };
  CaseTable.prototype.order = function () {
    var col = this.sortCol, dir = this.sortDir;
    this.view.sort(function (a, b) {
      var x = a[col], y = b[col];
      if (NUMERIC[col]) {
        x = num(x); y = num(y);
        if (x === null || isNaN(x)) return 1;
        if (y === null || isNaN(y)) return -1;
        return (x - y) * dir || 0;
      }
      if (col === C.status) { x = RANK[x] === undefined ? UNKNOWN_RANK : RANK[x]; y = RANK[y] === undefined ? UNKNOWN_RANK : RANK[y]; return (x - y) * dir; }
      return String(x).localeCompare(String(y), undefined, {numeric: true}) * dir;
    });
  };
  CaseTable.prototype.sort = function (col, th) {
    this.sortDir = this.sortCol === col ? -this.sortDir : (NUMERIC[col] ? -1 : 1);
    this.sortCol = col;
    this.root.querySelectorAll("th[data-col]").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", this.sortDir > 0 ? "ascending" : "descending");
    this.order();
    this.page = 0;
    this.draw();
  };
  CaseTable.prototype.turn = function (step) {
    var pages = Math.max(1, Math.ceil(this.view.length / PAGE));
    this.page = Math.min(pages - 1, Math.max(0, this.page + step));
    this.draw();
  };
  CaseTable.prototype.draw = function () {
    var start = this.page * PAGE, rows = this.view.slice(start, start + PAGE), html = [], self = this;
    rows.forEach(function (r) {
      var i = self.index.get(r);
      var st = RANK[r[C.status]] === undefined ? "other" : r[C.status];
      html.push('<tr class="row" data-i="' + i + '"><td>' + esc(r[C.backend]) + "</td><td>" + esc(r[C.dtype]) +
        '</td><td class="mono">' + esc(r[C.kase]) + (r[C.check] !== "reference" ? ' <span class="tag">' + esc(r[C.check]) + "</span>" : "") +
        '</td><td><span class="status st-' + esc(st) + '">' + esc(r[C.status]) + "</span>" +
        (r[C.failure] ? ' <span class="tag">' + esc(r[C.failure]) + "</span>" : "") +
        '</td><td class="n">' + fmt(r[C.abs]) + "</td>" + relative(r) + '<td class="n' + (num(r[C.budget]) > 1 ? " over" : "") + '">' + fmt(r[C.budget]) +
        '</td><td class="small" title="' + esc(r[C.source]) + '">' + esc(r[C.tol]) + '</td><td class="detail">' +
        esc(r[C.detail].length > 140 ? r[C.detail].slice(0, 140) + "…" : r[C.detail]) +
        (r[C.note] ? '<br><span class="diag">' + esc(r[C.note]) + "</span>" : "") + "</td></tr>");
      if (self.open[i]) {
        var cmd = reproCommand(self.op, r, self.flags);
        html.push('<tr class="more"><td colspan="10"><div class="detail full">' + esc(r[C.detail]) + "</div>" +
          (r[C.source] ? '<div class="small">tolerance: ' + esc(r[C.source]) + "</div>" : "") +
          '<code class="repro">' + esc(cmd) + '</code><button type="button" class="copy" data-copy="' + esc(cmd) +
          '">copy</button></td></tr>');
      }
    });
    if (!rows.length) html.push('<tr><td colspan="10" class="muted">No result matches the filters.</td></tr>');
    this.tbody.innerHTML = html.join("");
    var pages = Math.max(1, Math.ceil(this.view.length / PAGE));
    this.root.querySelector(".count").textContent = this.view.length + " of " + this.rows.length + " results";
    this.root.querySelector(".page").textContent = (this.page + 1) + " / " + pages;
    this.root.querySelector(".pager").style.visibility = pages > 1 ? "visible" : "hidden";
  };

  // A table is built when its op's section opens or a control of it is first used: a run's page holds
  // thousands of rows, and most of its tables are never looked at. Building one only on the reader's
  // action keeps the layout still while the page scrolls to a link's target.
  var tables = {};
  function table(root) {
    var op = root.getAttribute("data-op");
    if (!tables[op]) tables[op] = new CaseTable(root);
    return tables[op];
  }
  function buildOpen(details) {
    if (!details.open) return;
    details.querySelectorAll(".cases").forEach(table);
  }
  document.querySelectorAll("details.op").forEach(function (d) {
    buildOpen(d);
    d.addEventListener("toggle", function () { buildOpen(d); });
  });
  document.querySelectorAll(".cases").forEach(function (root) {
    if (!root.closest("details.op")) table(root);
  });

  // A link to something inside a closed section opens the section first, so that the link lands.
  function reveal(el) {
    for (var d = el; d; d = d.parentElement) {
      if (d.tagName === "DETAILS" && !d.open) d.open = true;
    }
  }
  function target(hash) {
    if (!hash || hash.length < 2) return null;
    try { return document.getElementById(decodeURIComponent(hash.slice(1))); } catch (err) { return null; }
  }
  function follow() {
    var el = target(location.hash);
    if (el) { reveal(el); el.scrollIntoView(); }
  }
  document.addEventListener("click", function (e) {
    var a = e.target.closest('a[href^="#"]');
    if (a) reveal(target(a.getAttribute("href")));
  }, true);
  window.addEventListener("hashchange", follow);
  // A printed report shows everything: every closed section opens for printing.
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details:not([open])").forEach(function (d) { d.open = true; });
  });
  if (location.hash) follow();

  // The matrix: a shadow over the pinned columns where columns are hidden, and a hint when it scrolls.
  var box = document.querySelector(".matrix-scroll");
  if (box) {
    var edges = function () {
      var over = box.scrollWidth > box.clientWidth + 1;
      box.parentElement.classList.toggle("overflows", over);
      box.classList.toggle("more-left", over && box.scrollLeft > 0);
      box.classList.toggle("more-right", over && box.scrollLeft + box.clientWidth < box.scrollWidth - 1);
    };
    box.addEventListener("scroll", edges, {passive: true});
    window.addEventListener("resize", edges);
    edges();
  }
  // One listener per event for every table's controls, so that a control works before its table is built.
  document.addEventListener("input", function (e) {
    var root = e.target.closest(".cases");
    if (root && e.target.closest(".controls")) table(root).apply();
  });
  document.addEventListener("click", function (e) {
    var root = e.target.closest(".cases");
    if (!root) return;
    var t = table(root), th = e.target.closest("th[data-col]"), tr = e.target.closest("tr.row");
    if (e.target.closest(".prev")) t.turn(-1);
    else if (e.target.closest(".next")) t.turn(1);
    else if (th) t.sort(parseInt(th.getAttribute("data-col"), 10), th);
    else if (tr && !e.target.closest("button")) t.toggle(tr.getAttribute("data-i"));
  });
  // A matrix cell opens the op's case table filtered to that backend and dtype.
  document.querySelectorAll("a.jump").forEach(function (a) {
    a.addEventListener("click", function () {
      var root = document.querySelector('.cases[data-op="' + a.getAttribute("data-op") + '"]');
      if (!root) return;
      reveal(root);
      var t = table(root);
      t.set("f-backend", a.getAttribute("data-backend"));
      t.set("f-dtype", a.getAttribute("data-dtype"));
      t.set("f-status", "");
      t.set("f-text", "");
      t.apply();
    });
  });
  document.addEventListener("click", function (e) {
    var b = e.target.closest("button.copy");
    if (!b) return;
    var text = b.getAttribute("data-copy");
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { b.textContent = "copied"; });
    } else {
      var t = document.createElement("textarea");
      t.value = text;
      document.body.appendChild(t);
      t.select();
      try { document.execCommand("copy"); b.textContent = "copied"; } catch (err) { b.textContent = "select it"; }
      t.remove();
    }
    setTimeout(function () { b.textContent = "copy"; }, 1500);
  });
})();

// gcbench reports: the results table (filter, sort, pages) and the cell page. Plain
// JavaScript, no library; every value is written with textContent, never as HTML.
"use strict";

function gcTable(rootId, data, cellPage) {
  const root = document.getElementById(rootId);
  const cols = data.columns;
  const pageSize = 100;
  let rows = data.rows.map((r, i) => ({ r: r, i: i }));
  let shown = rows;
  let sortCol = -1, sortDir = 1, page = 0;

  const controls = document.createElement("div");
  controls.className = "controls";
  const filter = document.createElement("input");
  filter.type = "search";
  filter.placeholder = "filter: words anywhere in a row, or column=value (e.g. strategy=fp16)";
  filter.setAttribute("aria-label", "filter rows");
  const count = document.createElement("span");
  count.className = "meta";
  const prev = document.createElement("button");
  prev.textContent = "‹ previous";
  const next = document.createElement("button");
  next.textContent = "next ›";
  controls.append(filter, " ", prev, " ", next, " ", count);
  const wrap = document.createElement("div");
  wrap.className = "tablewrap";
  const table = document.createElement("table");
  const thead = table.createTHead();
  const tbody = table.createTBody();
  wrap.append(table);
  root.append(controls, wrap);

  const head = thead.insertRow();
  cols.forEach((c, k) => {
    const th = document.createElement("th");
    th.textContent = c;
    th.className = "sortable" + (data.numeric[k] ? "" : " text");
    const meaning = data.meanings && data.meanings[k];
    th.title = (meaning ? c + ": " + meaning + "; click to sort" : "sort by " + c);
    th.addEventListener("click", () => {
      sortDir = sortCol === k ? -sortDir : 1;
      sortCol = k;
      apply();
    });
    head.append(th);
  });

  function matches(row, terms) {
    return terms.every((t) => {
      const eq = t.indexOf("=");
      if (eq > 0) {
        const k = cols.indexOf(t.slice(0, eq));
        if (k >= 0) return String(row.r[k] ?? "").toLowerCase() === t.slice(eq + 1);
      }
      return row.r.some((v) => v !== null && String(v).toLowerCase().includes(t));
    });
  }

  function apply() {
    const terms = filter.value.trim().toLowerCase().split(/\s+/).filter((t) => t);
    shown = terms.length ? rows.filter((row) => matches(row, terms)) : rows.slice();
    if (sortCol >= 0) {
      const k = sortCol;
      shown.sort((a, b) => {
        const x = a.r[k], y = b.r[k];
        if (x === y) return a.i - b.i;
        if (x === null) return 1;
        if (y === null) return -1;
        return (x < y ? -1 : 1) * sortDir;
      });
    }
    page = 0;
    render();
  }

  function fmt(v) {
    if (v === null) return "";
    if (typeof v === "number" && Math.abs(v) >= 1e4) return Math.round(v).toLocaleString("en-US");
    if (typeof v === "number" && !Number.isInteger(v)) return v.toPrecision(4);
    return String(v);
  }

  function render() {
    const pages = Math.max(1, Math.ceil(shown.length / pageSize));
    page = Math.min(Math.max(page, 0), pages - 1);
    tbody.replaceChildren();
    const idCol = cols.indexOf("cell_id");
    for (const row of shown.slice(page * pageSize, (page + 1) * pageSize)) {
      const tr = tbody.insertRow();
      row.r.forEach((v, k) => {
        const td = tr.insertCell();
        if (!data.numeric[k]) td.className = "text";
        if (k === idCol && cellPage && data.details[row.i]) {
          const a = document.createElement("a");
          a.href = cellPage + "#" + v;
          a.textContent = String(v).slice(0, 12);
          a.title = "plan, timeline and Chrome trace of cell " + v;
          td.append(a);
        } else {
          td.textContent = k === idCol ? String(v).slice(0, 12) : fmt(v);
        }
      });
    }
    count.textContent = shown.length + " of " + rows.length + " rows · page " + (page + 1) +
      " of " + pages;
    prev.disabled = page === 0;
    next.disabled = page >= pages - 1;
  }

  filter.addEventListener("input", apply);
  prev.addEventListener("click", () => { page -= 1; render(); });
  next.addEventListener("click", () => { page += 1; render(); });
  apply();
}

// The cell page: cell.html#<cell-id> loads cells/<cell-id>.js (a script, since pages
// opened from file:// may not fetch) and draws what it holds.
function gcCellPage() {
  const id = location.hash.slice(1);
  const status = document.getElementById("status");
  if (!/^[0-9a-f]{64}$/.test(id)) {
    status.textContent = "No cell chosen: open this page from the run page's table.";
    return;
  }
  status.textContent = "Loading cell " + id.slice(0, 12) + "…";
  window.GC_CELL = undefined;
  const s = document.createElement("script");
  s.src = "cells/" + id + ".js";
  s.onerror = () => { status.textContent = "This report has no details of cell " + id + "."; };
  s.onload = () => drawCell(id, window.GC_CELL);
  document.head.append(s);
}

function drawCell(id, cell) {
  const status = document.getElementById("status");
  status.textContent = "";
  document.getElementById("title").textContent = cell.title;
  const info = document.getElementById("config");
  info.replaceChildren();
  for (const [k, v] of cell.config) {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = v;
    info.append(dt, dd);
  }
  const links = document.getElementById("downloads");
  links.replaceChildren();
  const timeline = cell.figures.find(([name]) => name === "timeline");
  if (timeline) {
    const a = document.createElement("a");
    a.href = "#" + id;
    a.id = "chrome-trace";
    a.download = id + ".trace.json";
    a.textContent = "Chrome trace of this iteration (opens in Perfetto or chrome://tracing)";
    a.addEventListener("click", () => {
      const text = JSON.stringify(chromeTrace(timeline[1]));
      a.href = URL.createObjectURL(new Blob([text], { type: "application/json" }));
    });
    links.append(a);
  }
  const figs = document.getElementById("figures");
  figs.replaceChildren();
  for (const [name, fig] of cell.figures) {
    const div = document.createElement("div");
    div.id = "fig-" + name;
    div.className = "plotly-graph-div";
    figs.append(div);
    Plotly.newPlot(div, fig.data, fig.layout, { displaylogo: false, responsive: true });
  }
  if (!cell.figures.length) status.textContent = "This cell has no plan or trace to draw.";
}

// The Trace Event Format of a timeline figure (one GPU): a thread per stream in
// gcbench's stream order, an X event per bar in microseconds, as gcbench/sim/chrome.py
// writes it for `gcbench simulate --trace` (the browser test checks they agree).
const STREAM_ORDER = ["compute", "pcie", "intra", "inter_tx", "inter_rx"];

function unescapeText(s) {
  return String(s).replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
}

function chromeTrace(fig) {
  const spans = [];
  for (const t of fig.data) {
    for (let i = 0; i < t.x.length; i++) {
      spans.push({ stream: unescapeText(t.y[i]), kind: unescapeText(t.name),
        name: unescapeText(t.text[i]), start: t.base[i] * 1e3, dur: t.x[i] * 1e3,
        bytes: t.customdata[i] });
    }
  }
  const rank = (s) => {
    const k = STREAM_ORDER.indexOf(s.split(":")[0]);
    return k < 0 ? STREAM_ORDER.length : k;
  };
  const streams = [...new Set(spans.map((s) => s.stream))].sort((a, b) =>
    rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
  const events = [
    { ph: "M", name: "process_name", pid: 0, tid: 0, args: { name: "machine 0" } },
    { ph: "M", name: "process_sort_index", pid: 0, tid: 0, args: { sort_index: 0 } },
  ];
  streams.forEach((s, k) => {
    events.push({ ph: "M", name: "thread_name", pid: 0, tid: k + 1, args: { name: "gpu 0 " + s } });
    events.push({ ph: "M", name: "thread_sort_index", pid: 0, tid: k + 1, args: { sort_index: k + 1 } });
  });
  spans.sort((a, b) => a.start - b.start || (a.stream < b.stream ? -1 : a.stream > b.stream ? 1 : 0));
  for (const s of spans) {
    if (s.dur <= 0) continue;
    const e = { ph: "X", name: s.name, cat: s.kind, pid: 0, tid: streams.indexOf(s.stream) + 1,
      ts: s.start, dur: s.dur };
    if (s.bytes) e.args = { bytes: s.bytes };
    events.push(e);
  }
  return { traceEvents: events, displayTimeUnit: "ms" };
}

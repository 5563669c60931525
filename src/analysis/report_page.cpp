// The report's page template: layout and CSS, then the inline JS that draws the data blob into
// SVG (header cards, findings, timeline, segment map, histogram, largest blocks). Nothing is
// fetched: the page is self-contained.
#include "report_page.hpp"

#include <string_view>

namespace gpumem::detail {
namespace {

const char* page_template = R"GPUMEM_HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@</title>
<style>
:root { --live:#3569b5; --cached:#f0a830; --unmapped:#d4d7dc; --reserved:#e0622c; --ink:#1d2330; --muted:#667085; --line:#e4e7ec; --bg:#f7f8fa; }
* { box-sizing:border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif; color:var(--ink); background:var(--bg); }
main { max-width:1240px; margin:0 auto; padding:16px 20px 40px; }
h1 { font-size:20px; margin:0 0 2px; }
h2 { font-size:16px; margin:0 0 6px; }
.sub { color:var(--muted); font-size:13px; }
section { background:#fff; border:1px solid var(--line); border-radius:8px; padding:12px 16px; margin-top:12px; }
.cards { display:grid; grid-template-columns:repeat(7,1fr); gap:8px; margin-top:10px; }
.card { background:#fff; border:1px solid var(--line); border-radius:8px; padding:8px 10px; }
.card .k { color:var(--muted); font-size:12px; }
.card .v { font-size:19px; font-weight:600; font-variant-numeric:tabular-nums; }
.card .n { color:var(--muted); font-size:11px; }
.card.bad .v { color:#b42318; }
.findings { list-style:none; margin:0; padding:0; }
.findings li { padding:3px 0; border-top:1px solid var(--line); }
.findings li:first-child { border-top:0; }
.sev { display:inline-block; min-width:62px; text-align:center; font-size:11px; font-weight:600; border-radius:10px; padding:1px 6px; margin-right:6px; text-transform:uppercase; }
.sev.info { background:#eef4ff; color:#3538cd; } .sev.warning { background:#fef0c7; color:#93370d; } .sev.error { background:#fee4e2; color:#b42318; }
.fid { font-family:ui-monospace,SFMono-Regular,Menlo,monospace; font-size:12px; color:var(--muted); margin-right:6px; }
.advice { color:var(--muted); font-size:12.5px; margin-left:74px; }
.note { color:var(--muted); font-size:12px; margin-top:4px; }
.legend { font-size:12px; color:var(--muted); }
.legend i { display:inline-block; width:11px; height:11px; border-radius:2px; vertical-align:-1px; margin:0 4px 0 12px; }
svg { display:block; }
table { margin-top:2px; }
svg text { font-size:11px; fill:var(--muted); font-family:inherit; }
.axis line, .axis path { stroke:#c8ccd3; }
.grid line { stroke:#eef0f3; }
table { border-collapse:collapse; width:100%; font-size:12.5px; font-variant-numeric:tabular-nums; }
th, td { text-align:right; padding:3px 8px; border-top:1px solid var(--line); white-space:nowrap; }
th { color:var(--muted); font-weight:600; border-top:0; }
td.l, th.l { text-align:left; }
.mono { font-family:ui-monospace,SFMono-Regular,Menlo,monospace; }
#tip { position:fixed; pointer-events:none; background:#1d2330; color:#fff; font-size:12px; padding:6px 8px; border-radius:6px; max-width:380px; display:none; z-index:10; line-height:1.4; }
#tip b { color:#fff; }
#errors { display:none; background:#fee4e2; color:#b42318; border:1px solid #fda29b; padding:8px 12px; border-radius:8px; margin-top:12px; }
.head { display:flex; justify-content:space-between; align-items:baseline; gap:12px; flex-wrap:wrap; }
.toggle { font-size:12.5px; color:var(--muted); }
.toggle label { margin-left:8px; cursor:pointer; }
</style>
</head>
<body data-render="pending">
<main>
<h1 id="title"></h1>
<div class="sub" id="subtitle"></div>
<div id="errors"></div>
<div class="cards" id="cards"></div>
<section id="findings-section"><h2>Doctor's findings</h2><ul class="findings" id="findings"></ul></section>
<section id="timeline-section"><div class="head"><h2>Live and reserved bytes over the trace</h2><span class="legend" id="timeline-legend"></span></div><div id="timeline"></div><div class="note" id="timeline-note"></div></section>
<section id="map-section"><div class="head"><h2>Segment map at peak reserved</h2><span class="toggle">Colour by <label><input type="radio" name="mapcolour" value="state" checked> state</label><label><input type="radio" name="mapcolour" value="stream"> stream</label></span></div><div class="legend" id="map-legend"></div><div id="map"></div><div class="note" id="map-note"></div></section>
<section id="hist-section"><h2>Request sizes</h2><div id="hist"></div><div class="note" id="hist-note"></div></section>
<section id="top-section"><h2 id="top-title">Largest live blocks at the peak</h2><div id="top"></div><div class="note" id="top-note"></div></section>
</main>
<div id="tip"></div>
<script type="application/json" id="report-data">@DATA@</script>
<script>
(function () {
  'use strict';
  var errors = [];
  var NS = 'http://www.w3.org/2000/svg';
  var D = null;
  function el(tag, attrs, parent, text) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function h(tag, attrs, parent, text) {
    var e = document.createElement(tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  var UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  function fmtB(b) {
    var i = 0, v = b;
    while (Math.abs(v) >= 1024 && i < 4) { v /= 1024; i++; }
    return (i === 0 ? String(Math.round(v)) : v.toFixed(Math.abs(v) < 10 ? 2 : Math.abs(v) < 100 ? 1 : 0)) + ' ' + UNITS[i];
  }
  function fmtAxisB(b) { return fmtB(b).replace(/\.0+ /, ' ').replace(/(\.\d)0 /, '$1 '); }
  function fmtDur(us) {
    if (us < 1000) return Math.round(us) + ' \u00b5s';
    if (us < 1e6) return (us / 1e3).toFixed(us < 1e4 ? 2 : 1) + ' ms';
    return (us / 1e6).toFixed(3) + ' s';
  }
  function fmtN(n) { return Number(n).toLocaleString('en-US'); }
  function hex(n) { return '0x' + Number(n).toString(16); }
  function esc(s) { return String(s).replace(/[&<>"]/g, function (c) { return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c]; }); }
  function clock(us) {
    if (us < 0) return '';
    var s = Math.floor(us / 1e6), u = us % 1e6;
    function p(n, w) { n = String(n); while (n.length < w) n = '0' + n; return n; }
    return p(Math.floor(s / 3600) % 24, 2) + ':' + p(Math.floor(s / 60) % 60, 2) + ':' + p(s % 60, 2) + '.' + p(u, 6);
  }
  function when(row, us) {
    var t = 'event #' + fmtN(row);
    if (us !== undefined && us >= 0 && D.trace.first_time_us >= 0)
      t += ' (' + clock(us) + ', +' + fmtDur(us - D.trace.first_time_us) + ')';
    return t;
  }
  var tip = document.getElementById('tip');
  function showTip(ev, html) {
    tip.innerHTML = html; tip.style.display = 'block';
    var x = ev.clientX + 14, y = ev.clientY + 14, w = tip.offsetWidth, hh = tip.offsetHeight;
    if (x + w > window.innerWidth - 4) x = ev.clientX - w - 14;
    if (y + hh > window.innerHeight - 4) y = ev.clientY - hh - 14;
    tip.style.left = x + 'px'; tip.style.top = y + 'px';
  }
  function hideTip() { tip.style.display = 'none'; }
  // A nice axis for byte values: ticks on whole KiB/MiB/GiB steps.
  function byteTicks(max) {
    if (max <= 0) max = 1;
    var unit = 1; while (unit * 1024 <= max && unit < Math.pow(1024, 4)) unit *= 1024;
    var raw = max / unit / 5, mag = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / mag;
    var step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * mag * unit;
    var top = Math.ceil(max / step) * step, ticks = [];
    for (var v = 0; v <= top + step / 2; v += step) ticks.push(v);
    return {top: top, ticks: ticks, unit: unit};
  }
  function niceTicks(max, n) {
    if (max <= 0) return [0];
    var raw = max / n, mag = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / mag;
    var step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag, out = [];
    for (var v = 0; v <= max; v += step) out.push(v);
    return out;
  }
  var STATE_NAMES = ['live', 'cached', 'unmapped'];
  var STATE_COLOURS = ['var(--live)', 'var(--cached)', 'var(--unmapped)'];
  var STREAM_COLOURS = ['#3569b5', '#d9480f', '#2f9e44', '#ae3ec9', '#0c8599', '#e8590c', '#5c940d', '#c2255c', '#1864ab', '#862e9c'];

  function drawHeader() {
    var T = D.trace, R = D.replay;
    document.getElementById('title').textContent = D.title;
    var parts = [fmtN(T.rows) + ' rows', fmtN(T.allocations) + ' allocations', fmtN(T.frees) + ' frees'];
    if (T.duration_s > 0) parts.push(T.duration_s.toFixed(3) + ' s of wall time');
    parts.push('replayed through "' + R.resource + '" on the simulated device');
    if (R.peak_op >= 0) parts.push('peak reserved at ' + when(R.peak_op, R.peak_time_us));
    document.getElementById('subtitle').textContent = parts.join(' · ');
    var cards = document.getElementById('cards');
    function card(k, v, n, bad) {
      var c = h('div', {'class': 'card' + (bad ? ' bad' : '')}, cards);
      h('div', {'class': 'k'}, c, k); h('div', {'class': 'v'}, c, v); h('div', {'class': 'n'}, c, n || '\u00a0');
    }
    // The figures as `gpumem replay --json` names them (replay_figures), so both read alike.
    var F = {};
    R.figures.forEach(function (g) { F[g[0]] = g[1]; });
    card('peak_live_bytes', fmtB(F.peak_live_bytes), fmtN(F.peak_live_bytes) + ' B');
    card('peak_reserved_bytes', fmtB(F.peak_reserved_bytes), fmtN(F.peak_reserved_bytes) + ' B');
    card('fragmentation', F.fragmentation.toFixed(3) + '\u00d7', 'peak reserved / peak live', F.fragmentation >= 1.5);
    card('final_reserved_bytes', fmtB(F.final_reserved_bytes), 'after the last row');
    card('ops', fmtN(F.ops), 'allocations + frees replayed');
    card('ns_per_op', F.ns_per_op.toFixed(1) + ' ns', 'host time per op, as gpumem replay measures it');
    card('failed_allocs', fmtN(F.failed_allocs), F.trace_failures ? fmtN(F.trace_failures) + ' failure rows in the trace' : 'of the replay', F.failed_allocs > 0);
    if (F.granules_mapped_unmapped_per_1000_ops !== undefined)
      card('granules_mapped_unmapped_per_1000_ops', F.granules_mapped_unmapped_per_1000_ops.toFixed(2), fmtN(F.maps) + ' maps, ' + fmtN(F.unmaps) + ' unmaps');
  }

  function drawFindings() {
    var ul = document.getElementById('findings');
    var order = D.findings.slice().sort(function (a, b) { return b.rank - a.rank; });
    if (!order.length) h('li', {}, ul, 'No findings.');
    order.forEach(function (f) {
      var li = h('li', {}, ul);
      h('span', {'class': 'sev ' + f.severity}, li, f.severity);
      h('span', {'class': 'fid'}, li, f.id);
      h('span', {}, li, f.summary);
      if (f.severity !== 'info' && f.advice) h('div', {'class': 'advice'}, li, '\u2192 ' + f.advice);
      var figs = f.figures.map(function (g) { return g[0] + ' = ' + (/bytes/.test(g[0]) ? fmtB(g[1]) : g[2] ? fmtN(g[1]) : (+g[1].toPrecision(4))); });
      li.title = figs.join('\n') + (f.advice ? '\n\n' + f.advice : '');
    });
    D.skipped.forEach(function (s) {
      var li = h('li', {}, ul);
      h('span', {'class': 'sev info'}, li, 'skipped'); h('span', {}, li, s);
    });
  }

  function drawTimeline() {
    var L = D.timeline, box = document.getElementById('timeline');
    var n = L.row.length;
    if (!n) { box.textContent = 'No timeline: the trace has no rows.'; return; }
    var W = Math.max(640, box.clientWidth || 1166), H = 260, ml = 70, mr = 10, mt = 20, mb = 34, pw = W - ml - mr, ph = H - mt - mb;
    var svg = el('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, id: 'timeline-svg'}, box);
    var maxY = 0;
    for (var i = 0; i < n; i++) maxY = Math.max(maxY, L.live[i], L.reserved.length ? L.reserved[i] : 0);
    var yt = byteTicks(maxY * 1.02), lastRow = Math.max(1, D.trace.rows - 1);
    function X(r) { return ml + pw * r / lastRow; }
    function Y(b) { return mt + ph - ph * b / yt.top; }
    var grid = el('g', {'class': 'grid'}, svg), axis = el('g', {'class': 'axis'}, svg);
    yt.ticks.forEach(function (v) {
      el('line', {x1: ml, x2: ml + pw, y1: Y(v), y2: Y(v)}, grid);
      el('text', {x: ml - 6, y: Y(v) + 4, 'text-anchor': 'end'}, axis, v === 0 ? '0' : +(v / yt.unit).toFixed(3) + ' ' + UNITS[Math.round(Math.log2(yt.unit) / 10)]);
    });
    niceTicks(lastRow, 8).forEach(function (r) {
      el('line', {x1: X(r), x2: X(r), y1: mt + ph, y2: mt + ph + 4}, axis);
      el('text', {x: X(r), y: mt + ph + 16, 'text-anchor': 'middle'}, axis, fmtN(r));
    });
    el('line', {x1: ml, x2: ml + pw, y1: mt + ph, y2: mt + ph}, axis);
    el('text', {x: ml + pw / 2, y: H - 2, 'text-anchor': 'middle'}, axis, 'event (trace row)');
    function pts(arr) {
      var s = [];
      for (var i = 0; i < n; i++) s.push(X(L.row[i]).toFixed(1) + ',' + Y(arr[i]).toFixed(1));
      return s.join(' ');
    }
    if (L.reserved.length)
      el('polyline', {points: pts(L.reserved), fill: 'none', stroke: 'var(--reserved)', 'stroke-width': 1.6, 'stroke-linejoin': 'round', 'class': 'series-reserved'}, svg);
    el('polyline', {points: pts(L.live), fill: 'none', stroke: 'var(--live)', 'stroke-width': 1.3, 'stroke-linejoin': 'round', 'class': 'series-live'}, svg);
    if (D.replay.peak_op >= 0) {
      var px = X(D.replay.peak_op);
      el('line', {x1: px, x2: px, y1: mt, y2: mt + ph, stroke: '#98a2b3', 'stroke-dasharray': '4 3'}, svg);
      el('text', {x: px + (px > ml + pw - 200 ? -4 : 4), y: mt - 6, 'text-anchor': px > ml + pw - 200 ? 'end' : 'start'}, svg, 'peak reserved: the segment map below');
      el('line', {x1: px, x2: px, y1: mt - 4, y2: mt}, svg).setAttribute('stroke', '#98a2b3');
    }
    var guide = el('line', {y1: mt, y2: mt + ph, stroke: '#1d2330', 'stroke-width': 0.8, visibility: 'hidden'}, svg);
    var dotL = el('circle', {r: 3.5, fill: 'var(--live)', visibility: 'hidden'}, svg);
    var dotR = el('circle', {r: 3.5, fill: 'var(--reserved)', visibility: 'hidden'}, svg);
    var overlay = el('rect', {x: ml, y: mt, width: pw, height: ph, fill: 'transparent'}, svg);
    overlay.addEventListener('mousemove', function (ev) {
      var rect = svg.getBoundingClientRect(), mx = (ev.clientX - rect.left) * W / rect.width;
      var r = (mx - ml) / pw * lastRow, lo = 0, hi = n - 1;
      while (lo < hi) { var mid = (lo + hi) >> 1; if (L.row[mid] < r) lo = mid + 1; else hi = mid; }
      if (lo > 0 && Math.abs(L.row[lo - 1] - r) < Math.abs(L.row[lo] - r)) lo--;
      var x = X(L.row[lo]);
      guide.setAttribute('x1', x); guide.setAttribute('x2', x); guide.setAttribute('visibility', 'visible');
      dotL.setAttribute('cx', x); dotL.setAttribute('cy', Y(L.live[lo])); dotL.setAttribute('visibility', 'visible');
      var html = '<b>' + esc(when(L.row[lo], L.time[lo])) + '</b>';
      if (L.first[lo] !== L.last[lo]) html += '<br>point covers events ' + fmtN(L.first[lo]) + '\u2013' + fmtN(L.last[lo]);
      html += '<br>live: ' + fmtB(L.live[lo]) + (L.first[lo] !== L.last[lo] ? ' (highest in the range)' : '');
      if (L.reserved.length) {
        dotR.setAttribute('cx', x); dotR.setAttribute('cy', Y(L.reserved[lo])); dotR.setAttribute('visibility', 'visible');
        html += '<br>reserved: ' + fmtB(L.reserved[lo]);
      }
      showTip(ev, html);
    });
    overlay.addEventListener('mouseleave', function () {
      hideTip(); guide.setAttribute('visibility', 'hidden'); dotL.setAttribute('visibility', 'hidden'); dotR.setAttribute('visibility', 'hidden');
    });
    document.getElementById('timeline-legend').innerHTML =
      '<i style="background:var(--live)"></i>live (requested by the trace)' +
      (L.reserved.length ? '<i style="background:var(--reserved)"></i>reserved (held by "' + esc(D.replay.resource) + '")' : '');
    var note = fmtN(D.trace.rows) + ' events drawn as ' + fmtN(n) + ' points';
    if (L.bucket > 1) note += ' (downsampled to at most ' + fmtN(L.max_points) + ': each point is the highest live byte count of its run of ' + fmtN(L.bucket) + ' events; reserved comes from ' + fmtN(L.samples) + ' samples taken by the replay)';
    else note += ' (one per event, not downsampled)';
    note += '.';
    if (!L.reserved.length) note += ' Reserved bytes were not recorded by this replay.';
    if (D.trace.first_time_us < 0) note += ' The trace has no wall times.';
    document.getElementById('timeline-note').textContent = note;
  }

  function drawMap() {
    var M = D.map, box = document.getElementById('map');
    if (!M.rects.length) { box.textContent = 'No segment map: the resource "' + D.replay.resource + '" has none (pool resources only).'; return; }
    // Rect fields: [address, bytes, state, stream index (-1 mixed), segment, count, live, cached, unmapped, lifetime index]
    var segs = [], segIndex = {};
    M.rects.forEach(function (r, i) {
      var s = segIndex[r[4]];
      if (s === undefined) { s = segIndex[r[4]] = segs.length; segs.push({id: r[4], base: r[0], bytes: 0, first: i}); }
      segs[s].bytes = r[0] + r[1] - segs[s].base;
    });
    var total = 0; segs.forEach(function (s) { total += s.bytes; });
    var W = Math.max(640, box.clientWidth || 1166), ml = 76, rowW = W - ml - 4, gap = 4, rowH = 20, rowGap = 7;
    // Each row holds a power-of-two number of bytes, at most 24 rows (plus segment gaps).
    var rowsWanted = Math.max(1, Math.min(24, Math.ceil(total / (128 * 1024 * 1024))));
    var rowBytes = Math.pow(2, Math.ceil(Math.log2(Math.max(1, total / rowsWanted))));
    var bpp = rowBytes / rowW;
    // Lay segments end to end on a strip of px, wrapped into rows of rowW.
    var pos = 0;
    segs.forEach(function (s) {
      if (rowW - (pos % rowW) < 8 && pos % rowW !== 0) pos = Math.ceil(pos / rowW) * rowW;
      s.start = pos; pos += s.bytes / bpp + gap;
    });
    var nrows = Math.max(1, Math.ceil((pos - gap) / rowW - 1e-9));
    var H = nrows * (rowH + rowGap) + 4;
    var svg = el('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, id: 'map-svg'}, box);
    function pieces(p0, w) {  // strip [p0, p0+w) -> [[x, y, w]] per row
      var out = [];
      while (w > 0) {
        var r = Math.floor(p0 / rowW + 1e-9), x = p0 - r * rowW, ww = Math.min(w, rowW - x);
        if (ww <= 0) { p0 = (r + 1) * rowW; continue; }
        out.push([ml + x, r * (rowH + rowGap) + 2, ww]);
        p0 += ww; w -= ww;
      }
      return out;
    }
    var rowOffsets = [];
    for (var r = 0; r < nrows; r++) {
      el('rect', {x: ml, y: r * (rowH + rowGap) + 2, width: rowW, height: rowH, fill: '#fafbfc'}, svg);
      el('text', {x: ml - 6, y: r * (rowH + rowGap) + 2 + rowH / 2 + 4, 'text-anchor': 'end'}, svg, fmtAxisB(r * rowW * bpp));
      rowOffsets.push(r);
    }
    var g = el('g', {}, svg), rects = [];
    M.rects.forEach(function (b, i) {
      var s = segs[segIndex[b[4]]], p0 = s.start + (b[0] - s.base) / bpp, w = b[1] / bpp;
      pieces(p0, Math.max(w, 0.35)).forEach(function (pc) {
        var e = el('rect', {x: pc[0].toFixed(2), y: pc[1], width: Math.max(pc[2], 0.35).toFixed(2), height: rowH, 'class': 'blk', 'data-i': i}, g);
        if (pc[2] >= 3) { e.setAttribute('stroke', '#fff'); e.setAttribute('stroke-width', 0.8); }
        rects.push(e);
      });
    });
    segs.forEach(function (s) {
      pieces(s.start, 1.2).forEach(function (pc) {
        el('rect', {x: pc[0], y: pc[1] - 2, width: 1.2, height: rowH + 4, fill: '#1d2330'}, svg);
      });
    });
    var mode = 'state';
    function colour() {
      rects.forEach(function (e) {
        var b = M.rects[+e.getAttribute('data-i')], f, op = 1;
        if (mode === 'state' || b[2] === 2) f = STATE_COLOURS[b[2]];
        else { f = b[3] < 0 ? '#667085' : STREAM_COLOURS[b[3] % STREAM_COLOURS.length]; if (b[2] === 1) op = 0.4; }
        e.setAttribute('fill', f); e.setAttribute('fill-opacity', op);
      });
      var lg = document.getElementById('map-legend');
      if (mode === 'state') lg.innerHTML = '<i style="background:var(--live)"></i>live<i style="background:var(--cached)"></i>cached (mapped, free)<i style="background:var(--unmapped)"></i>unmapped (address space only)<i style="background:#1d2330;width:2px"></i>segment start';
      else lg.innerHTML = M.streams.map(function (s, i) { return '<i style="background:' + STREAM_COLOURS[i % STREAM_COLOURS.length] + '"></i>stream ' + esc(s); }).join('') +
        '<i style="background:#667085"></i>mixed (merged)<span style="margin-left:12px">solid: live, pale: cached</span>';
    }
    colour();
    Array.prototype.forEach.call(document.querySelectorAll('input[name=mapcolour]'), function (inp) {
      inp.addEventListener('change', function () { mode = inp.value; colour(); });
    });
    svg.addEventListener('mousemove', function (ev) {
      var t = ev.target;
      if (!t.getAttribute || t.getAttribute('class') !== 'blk') { hideTip(); return; }
      var b = M.rects[+t.getAttribute('data-i')];
      var html = '<b>' + hex(b[0]) + '</b> \u00b7 ' + fmtB(b[1]) + '<br>';
      if (b[5] > 1) {
        html += fmtN(b[5]) + ' small blocks merged for drawing: ' + fmtB(b[6]) + ' live, ' + fmtB(b[7]) + ' cached, ' + fmtB(b[8]) + ' unmapped';
      } else {
        html += 'state: ' + STATE_NAMES[b[2]];
      }
      html += '<br>stream: ' + (b[3] < 0 ? 'several' : esc(M.streams[b[3]])) + (b[2] === 1 && b[5] === 1 ? ' (owner of the cached block; 0x0 = ready for any)' : '') + ' \u00b7 segment ' + b[4];
      if (b[9] >= 0) {
        var lt = D.lifetimes[b[9]];
        html += '<br>request: ' + fmtB(lt[1]) + '<br>allocated at ' + esc(when(lt[2], lt[3]));
        html += '<br>' + (lt[4] >= 0 ? 'freed at ' + esc(when(lt[4], lt[5])) + '<br>lived ' + fmtN(lt[4] - lt[2]) + ' events' + (lt[5] >= 0 && lt[3] >= 0 ? ', ' + fmtDur(lt[5] - lt[3]) : '') : 'never freed in the trace');
      } else if (b[2] === 0 && b[5] === 1 && D.lifetimes_paired) {
        html += '<br>a slab of small objects (or a block no single request matches)';
      }
      showTip(ev, html);
    });
    svg.addEventListener('mouseleave', hideTip);
    var note = fmtN(M.blocks) + ' blocks (thin white lines separate neighbours) in ' + fmtN(segs.length) + ' segment' + (segs.length === 1 ? '' : 's') + ', ' + fmtB(total) + ' of address space drawn';
    if (M.merged) note += '; more than ' + fmtN(M.max_rects) + ' blocks, so neighbouring blocks under ' + fmtB(M.merge_below) + ' are merged into ' + fmtN(M.rects.length) + ' rectangles (hover shows what each holds)';
    note += '. Each row is ' + fmtB(rowW * bpp) + '.';
    if (!D.lifetimes_paired) note += ' Lifetimes are not shown: ' + D.lifetimes_note;
    document.getElementById('map-note').textContent = note;
  }

  function drawHist() {
    var B = D.histogram, box = document.getElementById('hist');
    if (!B.length) { box.textContent = 'The trace makes no allocation.'; return; }
    var W = Math.max(640, box.clientWidth || 1166), H = 210, ml = 70, mr = 10, mt = 14, mb = 40, pw = W - ml - mr, ph = H - mt - mb;
    var svg = el('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, id: 'hist-svg'}, box);
    var lo = B[0].log2, hi = B[B.length - 1].log2, nb = hi - lo + 1, maxC = 0;
    B.forEach(function (b) { maxC = Math.max(maxC, b.count); });
    var yt = niceTicks(maxC * 1.05, 4), top = yt[yt.length - 1] < maxC ? maxC : Math.max(maxC, yt[yt.length - 1]);
    function Y(c) { return mt + ph - ph * c / top; }
    var grid = el('g', {'class': 'grid'}, svg), axis = el('g', {'class': 'axis'}, svg);
    yt.forEach(function (v) { el('line', {x1: ml, x2: ml + pw, y1: Y(v), y2: Y(v)}, grid); el('text', {x: ml - 6, y: Y(v) + 4, 'text-anchor': 'end'}, axis, fmtN(v)); });
    var bw = pw / nb;
    B.forEach(function (b) {
      var x = ml + (b.log2 - lo) * bw;
      var r = el('rect', {x: x + 1, y: Y(b.count), width: Math.max(1, bw - 2), height: Math.max(0, mt + ph - Y(b.count)), fill: 'var(--live)', 'class': 'bar'}, svg);
      r.addEventListener('mousemove', function (ev) {
        showTip(ev, '<b>' + (b.log2 < 0 ? '0 B' : fmtB(Math.pow(2, b.log2)) + ' \u2264 size < ' + fmtB(Math.pow(2, b.log2 + 1))) + '</b><br>' + fmtN(b.count) + ' requests (' + (100 * b.count / D.trace.allocations).toFixed(1) + '%)<br>' + fmtB(b.bytes) + ' requested in total');
      });
      r.addEventListener('mouseleave', hideTip);
    });
    for (var k = lo; k <= hi; k++) {
      if (nb > 24 && (k - lo) % 2) continue;
      el('text', {x: ml + (k - lo + 0.5) * bw, y: mt + ph + 14, 'text-anchor': 'middle'}, axis, k < 0 ? '0 B' : fmtAxisB(Math.pow(2, k)));
    }
    el('line', {x1: ml, x2: ml + pw, y1: mt + ph, y2: mt + ph}, axis);
    el('text', {x: ml + pw / 2, y: H - 4, 'text-anchor': 'middle'}, axis, 'request size (log2 buckets: each bar counts sizes from its label up to twice it)');
    document.getElementById('hist-note').textContent = fmtN(D.trace.allocations) + ' allocation requests; the y axis counts requests.';
  }

  function drawTop() {
    var box = document.getElementById('top'), rows = D.top;
    document.getElementById('top-title').textContent = 'The ' + rows.length + ' largest live blocks at the peak';
    if (!rows.length) { box.textContent = 'No segment map: nothing to list.'; return; }
    function brief(row, us) { return '#' + fmtN(row) + (us >= 0 && D.trace.first_time_us >= 0 ? ' (+' + fmtDur(us - D.trace.first_time_us) + ')' : ''); }
    var t = h('table', {}, h('div', {style: 'overflow-x:auto'}, box)), hr = h('tr', {}, h('thead', {}, t));
    ['#', 'address', 'size', 'requested', 'stream', 'segment', 'allocated at (event, +time)', 'freed at', 'lifetime'].forEach(function (c, i) { h('th', {'class': i === 1 || i > 5 ? 'l' : ''}, hr, c); });
    var tb = h('tbody', {}, t);
    rows.forEach(function (b, i) {
      var tr = h('tr', {}, tb), lt = b[9] >= 0 ? D.lifetimes[b[9]] : null;
      h('td', {}, tr, i + 1); h('td', {'class': 'l mono'}, tr, hex(b[0])); h('td', {}, tr, fmtB(b[1]));
      h('td', {}, tr, lt ? fmtB(lt[1]) : ''); h('td', {'class': 'mono'}, tr, D.map.streams[b[3]]); h('td', {}, tr, b[4]);
      h('td', {'class': 'l'}, tr, lt ? brief(lt[2], lt[3]) : (D.lifetimes_paired ? 'slab of small objects' : ''));
      h('td', {'class': 'l'}, tr, lt ? (lt[4] >= 0 ? brief(lt[4], lt[5]) : 'never') : '');
      h('td', {'class': 'l'}, tr, lt && lt[4] >= 0 ? fmtN(lt[4] - lt[2]) + ' events' + (lt[5] >= 0 && lt[3] >= 0 ? ', ' + fmtDur(lt[5] - lt[3]) : '') : '');
    });
  }

  function part(name, fn) {
    try { fn(); } catch (e) { errors.push(name + ': ' + (e && e.message ? e.message : e)); }
  }
  try {
    D = JSON.parse(document.getElementById('report-data').textContent);
    part('header', drawHeader);
    part('findings', drawFindings);
    part('timeline', drawTimeline);
    part('map', drawMap);
    part('histogram', drawHist);
    part('top', drawTop);
  } catch (e) {
    errors.push('data: ' + (e && e.message ? e.message : e));
  }
  document.body.setAttribute('data-errors', errors.join(' | '));
  if (errors.length) {
    var eb = document.getElementById('errors');
    eb.style.display = 'block'; eb.textContent = 'The page could not draw everything: ' + errors.join('; ');
  }
  document.body.setAttribute('data-render', errors.length ? 'error' : 'ok');
})();
</script>
</body>
</html>
)GPUMEM_HTML";

}  // namespace

std::string report_page(const std::string& title, const std::string& data_json) {
  std::string page = page_template;
  auto replace = [&](std::string_view what, const std::string& with) {
    const auto at = page.find(what);
    if (at != std::string::npos) page.replace(at, what.size(), with);
  };
  std::string safe;
  for (char c : title) {
    switch (c) {
      case '<': safe += "&lt;"; break;
      case '>': safe += "&gt;"; break;
      case '&': safe += "&amp;"; break;
      default: safe += c;
    }
  }
  replace("@TITLE@", safe);
  replace("@DATA@", data_json);
  return page;
}

}  // namespace gpumem::detail

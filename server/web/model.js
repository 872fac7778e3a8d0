/*
 * server/web/model.js — a pasted model request on the teaching page: a
 * bertviz-style head view plus one heat map per head (canvas), with the
 * masks' geometry outlined, entropy, mass and argmax per query row, and the
 * weights readable cell by cell from the keyboard. Every number drawn is
 * attnd's: the page only draws what /v1/attention returns. Calls go through
 * app.js (window.attnd).
 */
(function () {
  'use strict';
  var A = null;                       /* window.attnd, set in init */
  var $ = window.attndDraw.$, svg = window.attndDraw.svg, f3 = window.attndDraw.f3;  /* teach.js */
  function f6(x) { return A.fmt(x); }
  /* "1 head", "2 heads"; many: the plural when not one + s ("queries") */
  function count(n, one, many) { return n + ' ' + (n === 1 ? one : many || one + 's'); }

  /* ---- pasted model requests ------------------------------------------ */
  var EXAMPLE_TOKENS = ['The', 'cat', 'sat', 'on', 'the', 'mat'];
  function exampleRequest() {
    var h = 2, L = EXAMPLE_TOKENS.length, d = 4, q = [], k = [], v = [];
    function val(a, b, c) { return Math.round(Math.sin(1.7 * a + 2.3 * b + 0.9 * c) * 100) / 100; }
    for (var hh = 0; hh < h; hh++) {
      q.push([]); k.push([]); v.push([]);
      for (var i = 0; i < L; i++) {
        q[hh].push([]); k[hh].push([]); v[hh].push([]);
        for (var c = 0; c < d; c++) {
          q[hh][i].push(val(hh, i, c));
          k[hh][i].push(val(hh + 3, i, c + 1));
          v[hh][i].push(val(hh + 5, i, c + 2));
        }
      }
    }
    return { q: q, k: k, v: v, causal: true, tokens: { q: EXAMPLE_TOKENS, k: EXAMPLE_TOKENS } };
  }

  /* The sizes of a pasted tensor, outermost first: a base64 tensor's
   * "shape", or a nested array's lengths along its first elements. */
  function shapeOf(t) {
    if (t && typeof t === 'object' && !Array.isArray(t)) return Array.isArray(t.shape) ? t.shape : [];
    var s = [];
    for (var x = t; Array.isArray(x); x = x[0]) s.push(x.length);
    return s;
  }

  /* seq numbers the Draws: only the latest one's answer is drawn, so an
   * older request answered last (or after a typing mistake) is dropped */
  var model = { res: null, head: 0, hover: -1, seq: 0 };
  function drawModel() {
    var text = $('paste').value, req, my = ++model.seq;
    try { req = JSON.parse(text); } catch (e) {
      failed(A.localError('the pasted text is not JSON: ' + e.message));
      return;
    }
    if (!req || typeof req !== 'object' || Array.isArray(req)) {
      failed(A.localError('paste one JSON object, a /v1/attention request.'));
      return;
    }
    var qs = shapeOf(req.q), ks = shapeOf(req.k), rank = qs.length;
    if (rank > 3) {
      failed(A.localError('the page draws one sequence: paste q as [heads][n][d_k], ' +
        'not a batch (rank ' + rank + ').'));
      return;
    }
    var heads = rank === 3 ? qs[0] : 1, n = rank >= 2 ? qs[rank - 2] : 0;
    var L = ks.length === 3 ? ks[1] : ks.length === 2 ? ks[0] : 0;
    var tokens = Math.max(Number(n) || 0, Number(L) || 0);   /* the queries are tokens too */
    if (heads > 8 || tokens > 256) {
      failed(A.localError('the page draws up to 8 heads and 256 tokens (this has ' +
        count(heads, 'head') + ', ' + count(tokens, 'token') + ').'));
      return;
    }
    req.return = ['scores', 'weights', 'stats'];
    delete req.weights_top_k;           /* the maps need every weight, as numbers */
    delete req.encoding;
    $('model-status').textContent = 'Computing…';
    A.api('POST', '/v1/attention', req).then(function (res) {
      if (my !== model.seq) return;
      model.res = res;
      model.req = req;
      model.head = Math.min(model.head, shownHeads(res) - 1);
      A.fillError($('model-error'), null);
      renderModel();
      document.body.dataset.modelRounds = String(Number(document.body.dataset.modelRounds || 0) + 1);
    }, function (e) { if (my === model.seq) failed(e); });
  }

  /* A mistake in the pasted text or attnd's refusal: said beside the
   * panel, and the previous request's picture taken down so it is not
   * read as this one's. */
  function failed(e) {
    model.res = null;
    A.fillError($('model-error'), e);
    $('model-status').textContent = 'Not drawn.';
    ['heat-grid', 'heat-legend', 'row-stats', 'model-head', 'head-view'].forEach(function (id) {
      var el = $(id);
      while (el.firstChild) el.removeChild(el.firstChild);
    });
  }

  /* head h of m, one of the response's weights [h][n][L] or [n][L],
   * scores (the same) or stats' entropy, mass, argmax ([h][n] or [n]).
   * Whether m has a heads axis is read off the weights, whose rank is
   * one more than the stats': a [1][n][d] request gives [1][n] stats. */
  function perHead(m, h) { return Array.isArray(model.res.weights[0][0]) ? m[h] : m; }
  /* the heads a response carries (a `heads` selection returns only those)
   * and the name of the a-th */
  function shownHeads(res) { return res.meta.heads_returned ? res.meta.heads_returned.length : res.meta.heads; }
  function headName(a) {
    var hr = model.res.meta.heads_returned;
    return 'head ' + (hr ? hr[a] : a);
  }
  function labelsOf(side, count) {
    var t = model.res.meta.tokens && model.res.meta.tokens[side];
    var out = [];
    for (var i = 0; i < count; i++) out.push(t ? t[i] : (side === 'q' ? 'q' : 'k') + i);
    return out;
  }

  function renderModel() {
    var res = model.res, H = shownHeads(res), n = res.meta.n, L = res.meta.L;
    var sel = $('model-head');
    sel.textContent = '';
    for (var h = 0; h < H; h++) {
      var o = document.createElement('option');
      o.value = String(h);
      o.textContent = headName(h);
      sel.appendChild(o);
    }
    sel.value = String(model.head);
    var masks = [];
    if (res.meta.causal) masks.push('causal');
    if (model.req.window) masks.push('window' + (model.req.window.sinks ? ' with ' + count(model.req.window.sinks, 'sink') : ''));
    if (model.req.segments) masks.push('segments');
    if (model.req.mask) masks.push('mask');
    $('model-status').textContent = count(H, 'head') + ', ' + count(n, 'query', 'queries') + ' × ' +
      count(L, 'key') + (masks.length ? '; masks: ' + masks.join(', ') + ' (see the key below the maps)' : '') + '.';
    drawHeadView();
    drawHeatGrid();
    drawRowStats();
  }

  function drawHeadView() {
    var res = model.res, n = res.meta.n, L = res.meta.L, w = perHead(res.weights, model.head);
    var qs = labelsOf('q', n), ks = labelsOf('k', L);
    var rowH = Math.max(4, Math.min(20, 640 / Math.max(n, L))), H = Math.max(n, L) * rowH + 10;
    var s = $('head-view');
    while (s.firstChild) s.removeChild(s.firstChild);
    s.setAttribute('viewBox', '0 0 320 ' + H);
    s.setAttribute('height', String(H));
    svg('title', {}, s).textContent = headName(model.head) + ': lines from each query token to each key token, opacity = weight';
    var lines = svg('g', { class: 'lines' }, s);
    for (var i = 0; i < n; i++) {
      for (var j = 0; j < L; j++) {
        var p = w[i][j];
        if (!p) continue;
        var hidden = model.hover >= 0 && model.hover !== i;
        svg('line', { x1: 100, y1: 5 + (i + 0.5) * rowH, x2: 220, y2: 5 + (j + 0.5) * rowH,
          stroke: '#1d4ed8', 'stroke-width': 2, 'stroke-opacity': hidden ? 0 : p,
          'data-i': i, 'data-j': j, 'data-weight': p }, lines);
      }
    }
    var fs = Math.min(13, rowH * 0.8);
    qs.forEach(function (t, i) {
      var tx = svg('text', { x: 96, y: 5 + (i + 0.5) * rowH + fs / 3, 'text-anchor': 'end',
        'font-size': fs, tabindex: 0, class: 'tok', 'data-i': i, role: 'button', 'aria-pressed': 'false',
        'aria-label': 'query token ' + i + ' "' + t + '": show only its lines' }, s);
      fitText(tx, t, TOKEN_W);
      tx.addEventListener('mouseenter', function () { isolate(i); });
      tx.addEventListener('focus', function () { isolate(i); });
      tx.addEventListener('mouseleave', function () { isolate(-1); });
      tx.addEventListener('blur', function () { isolate(-1); });
      tx.addEventListener('keydown', function (e) {
        if (e.key === 'Escape') isolate(-1);
        if (e.key !== 'Enter' && e.key !== ' ') return;
        e.preventDefault();             /* a button: Enter and Space toggle it */
        isolate(model.hover === i ? -1 : i);
      });
    });
    ks.forEach(function (t, j) {
      var tx = svg('text', { x: 224, y: 5 + (j + 0.5) * rowH + fs / 3, 'font-size': fs }, s);
      fitText(tx, t, TOKEN_W);
    });
  }
  /* Token text t in tx, cut to at most w px with an ellipsis (the whole
   * token in a title); the head view's columns are TOKEN_W px wide. */
  var TOKEN_W = 92;
  function fitText(tx, t, w) {
    tx.textContent = t;
    if (tx.getComputedTextLength() <= w) return;
    var cps = Array.from(t), lo = 0, hi = cps.length;
    while (lo < hi) {                   /* the most code points that fit */
      var mid = Math.ceil((lo + hi) / 2);
      tx.textContent = cps.slice(0, mid).join('') + '\u2026';
      if (tx.getComputedTextLength() <= w) lo = mid; else hi = mid - 1;
    }
    tx.textContent = cps.slice(0, lo).join('') + '\u2026';
    svg('title', {}, tx).textContent = t;
  }
  /* only query token i's lines (i < 0: every line), without a redraw */
  function isolate(i) {
    model.hover = i;
    Array.prototype.forEach.call(document.querySelectorAll('#head-view line'), function (l) {
      var mine = i < 0 || Number(l.getAttribute('data-i')) === i;
      l.setAttribute('stroke-opacity', mine ? l.getAttribute('data-weight') : 0);
    });
    Array.prototype.forEach.call(document.querySelectorAll('#head-view text.tok'), function (t) {
      var on = Number(t.getAttribute('data-i')) === i;
      t.setAttribute('font-weight', on ? 'bold' : 'normal');
      t.setAttribute('aria-pressed', on ? 'true' : 'false');
    });
  }

  /* ---- where the masks fall: positions, causal, window, sinks, segments */

  /* the first batch element's row of a [n] or [B][n] array */
  function firstRow(a) { return Array.isArray(a) && Array.isArray(a[0]) ? a[0] : a; }

  /* The geometry of the masks as the design defines it (DESIGN part 2,
   * "Positions"): key and query positions (explicit, or counted within
   * segments, or P_k(j) = j and P_q(i) = L − n + i, i for top-left), the
   * causal rule from meta.causal, the window and its sinks. */
  function maskGeometry(req, meta) {
    var n = meta.n, L = meta.L, topLeft = meta.causal === 'top_left';
    var seg = req.segments ? { q: firstRow(req.segments.q), k: firstRow(req.segments.k) } : null;
    var pos = req.positions || {}, pq = [], pk = [], i, j;
    var kSeen = {}, qSeen = {}, kCount = {}, qCount = {};
    if (seg) {
      for (j = 0; j < L; j++) kCount[seg.k[j]] = (kCount[seg.k[j]] || 0) + 1;
      for (i = 0; i < n; i++) qCount[seg.q[i]] = (qCount[seg.q[i]] || 0) + 1;
    }
    for (j = 0; j < L; j++) {
      var sk = seg ? seg.k[j] : 0;
      kSeen[sk] = (kSeen[sk] || 0) + 1;
      pk.push(pos.k ? firstRow(pos.k)[j] : kSeen[sk] - 1);
    }
    for (i = 0; i < n; i++) {
      var sq = seg ? seg.q[i] : 0;
      qSeen[sq] = (qSeen[sq] || 0) + 1;
      var Ls = seg ? (kCount[sq] || 0) : L, ns = seg ? qCount[sq] : n;
      pq.push(pos.q ? firstRow(pos.q)[i] : (topLeft ? 0 : Ls - ns) + qSeen[sq] - 1);
    }
    var w = req.window || null;
    return {
      pq: pq, pk: pk, seg: seg, window: w,
      causal: meta.causal === 'bottom_right' || meta.causal === 'top_left',
      causalOk: function (i, j) { return pk[j] <= pq[i]; },
      inBand: function (i, j) {
        return (w.left === undefined || pk[j] >= pq[i] - w.left) &&
          (w.right === undefined || pk[j] <= pq[i] + w.right);
      },
      isSink: function (j) { return !!(w && w.sinks) && pk[j] < w.sinks; },
      sameSeg: function (i, j) { return seg.q[i] === seg.k[j]; }
    };
  }

  /* The overlays a map gets: each an outline (the edges between cells where
   * pred changes) in its own colour and dash, named in the legend. */
  var OVERLAYS = {
    causal: { colour: '#b91c1c', dash: [], width: 2, text: 'causal edge: keys right of it are in the query\'s future' },
    window: { colour: '#047857', dash: [5, 3], width: 2, text: 'window band: keys between the dashed edges are within the window' },
    sinks: { colour: '#7e22ce', dash: [], width: 2, text: 'sinks: the first keys, allowed at any distance (bar above the map)' },
    segments: { colour: '#111827', dash: [2, 2], width: 2, text: 'segment blocks: a query sees only its own sequence' }
  };
  function overlaysOf(geo) {
    var o = [];
    if (geo.causal) o.push('causal');
    if (geo.window && (geo.window.left !== undefined || geo.window.right !== undefined)) o.push('window');
    if (geo.window && geo.window.sinks) o.push('sinks');
    if (geo.seg) o.push('segments');
    return o;
  }
  /* edges only between two cells that both satisfy `within` (the query's
   * own segment), so one mask's outline does not trace another's */
  function contour(g, n, L, cell, pred, style, within) {
    var inside = within || function () { return true; };
    g.save();
    g.strokeStyle = style.colour;
    g.lineWidth = style.width;
    g.setLineDash(style.dash);
    g.beginPath();
    for (var i = 0; i < n; i++) {
      for (var j = 0; j < L; j++) {
        var here = pred(i, j);
        if (!inside(i, j))
          continue;
        if (j + 1 < L && inside(i, j + 1) && pred(i, j + 1) !== here) {
          g.moveTo((j + 1) * cell, i * cell);
          g.lineTo((j + 1) * cell, (i + 1) * cell);
        }
        if (i + 1 < n && inside(i + 1, j) && pred(i + 1, j) !== here) {
          g.moveTo(j * cell, (i + 1) * cell);
          g.lineTo((j + 1) * cell, (i + 1) * cell);
        }
      }
    }
    g.stroke();
    g.restore();
  }

  /* Tick labels: every `step`-th token so labels of FONT px never touch. */
  var FONT = 10, MARGIN_MAX = 64;
  function tickStep(cell) { return Math.max(1, Math.ceil((FONT + 2) / cell)); }
  function clip(g, t, width) {
    if (g.measureText(t).width <= width) return t;
    while (t.length > 1 && g.measureText(t + '\u2026').width > width) t = t.slice(0, -1);
    return t + '\u2026';
  }

  /* one heat map per head on canvas (thousands of cells, no DOM): query
   * tokens down the left, key tokens along the top (thinned when crowded),
   * masked cells hatched, the masks' geometry outlined on top */
  function drawHeatGrid() {
    var res = model.res, H = shownHeads(res), n = res.meta.n, L = res.meta.L;
    var box = $('heat-grid');
    box.textContent = '';
    var cell = Math.max(3, Math.min(24, Math.floor(300 / Math.max(n, L))));
    var geo = maskGeometry(model.req, res.meta), over = overlaysOf(geo);
    var qs = labelsOf('q', n), ks = labelsOf('k', L), step = tickStep(cell);
    var probe = document.createElement('canvas').getContext('2d');
    probe.font = FONT + 'px sans-serif';
    var widest = 0;
    qs.concat(ks).forEach(function (t) { widest = Math.max(widest, probe.measureText(t).width); });
    var ox = Math.min(MARGIN_MAX, Math.ceil(widest) + 6), oy = ox + (over.indexOf('sinks') >= 0 ? 6 : 0);
    var W = ox + L * cell + 2, Hh = oy + n * cell + 2, dpr = window.devicePixelRatio || 1;
    var ticksQ = [], ticksK = [];
    for (var t = 0; t < n; t += step) ticksQ.push(t);
    for (t = 0; t < L; t += step) ticksK.push(t);
    for (var h = 0; h < H; h++) {
      var fig = document.createElement('figure');
      var cv = document.createElement('canvas');
      cv.width = Math.round(W * dpr);
      cv.height = Math.round(Hh * dpr);
      cv.style.width = W + 'px';
      cv.setAttribute('role', 'img');
      var w = perHead(res.weights, h), s = perHead(res.scores, h), st = res.stats;
      var meanH = 0;
      for (var i0 = 0; i0 < n; i0++) meanH += Number(perHead(st.entropy, h)[i0]) / n;
      cv.setAttribute('aria-label', headName(h) + ' weights, ' + n + ' query tokens (rows) by ' + L +
        ' key tokens (columns); mean row entropy ' + meanH.toFixed(3) + ' nats' +
        (over.length ? '; outlined: ' + over.join(', ') : '') +
        '; focus it and use the arrow keys to read each cell');
      var g = cv.getContext('2d');
      g.scale(dpr, dpr);
      g.font = FONT + 'px sans-serif';
      g.fillStyle = '#374151';
      g.textBaseline = 'middle';
      g.textAlign = 'right';
      ticksQ.forEach(function (i) { g.fillText(clip(g, qs[i], ox - 5), ox - 3, oy + (i + 0.5) * cell); });
      g.save();
      g.rotate(-Math.PI / 2);
      g.textAlign = 'left';
      ticksK.forEach(function (j) { g.fillText(clip(g, ks[j], oy - 5), -(oy - 3), ox + (j + 0.5) * cell); });
      g.restore();
      g.translate(ox, oy);
      for (var i = 0; i < n; i++) {
        for (var j = 0; j < L; j++) {
          var x = j * cell, y = i * cell;
          if (s[i][j] === null) {          /* masked: grey, hatched */
            g.fillStyle = '#e5e7eb';
            g.fillRect(x, y, cell, cell);
            if (cell >= 4) {
              g.strokeStyle = '#9ca3af';
              g.lineWidth = 1;
              g.beginPath(); g.moveTo(x, y + cell); g.lineTo(x + cell, y); g.stroke();
            }
            continue;
          }
          g.fillStyle = A.cellColour(w[i][j], 'weights', 1).bg;
          g.fillRect(x, y, cell, cell);
        }
      }
      var own = geo.seg ? geo.sameSeg : null;
      if (geo.causal) contour(g, n, L, cell, geo.causalOk, OVERLAYS.causal, own);
      if (over.indexOf('window') >= 0) contour(g, n, L, cell, geo.inBand, OVERLAYS.window, own);
      if (geo.seg) contour(g, n, L, cell, geo.sameSeg, OVERLAYS.segments);
      if (over.indexOf('sinks') >= 0) {
        g.fillStyle = OVERLAYS.sinks.colour;
        for (j = 0; j < L; j++) if (geo.isSink(j)) g.fillRect(j * cell, -5, cell, 4);
        contour(g, n, L, cell, function (a, b) { return geo.isSink(b); }, OVERLAYS.sinks, own);
      }
      cv.dataset.head = String(h);
      cv.dataset.cell = String(cell);
      cv.dataset.ox = String(ox);
      cv.dataset.oy = String(oy);
      cv.dataset.ticksQ = ticksQ.join(',');
      cv.dataset.ticksK = ticksK.join(',');
      cv.dataset.overlays = over.join(',');
      cv.addEventListener('mousemove', labelCell(cv, h));
      var cap = document.createElement('figcaption');
      cap.textContent = headName(h);
      var out = document.createElement('p');
      out.className = 'cell-readout';
      out.setAttribute('aria-live', 'polite');
      readCells(cv, out, h, g.getImageData(0, 0, cv.width, cv.height));
      fig.appendChild(cv);
      fig.appendChild(cap);
      fig.appendChild(out);
      box.appendChild(fig);
    }
    drawLegend(over, step);
    markChosen();
  }

  /* the map of the head the head view and the table show */
  function markChosen() {
    Array.prototype.forEach.call(document.querySelectorAll('#heat-grid figure'), function (f, a) {
      f.classList.toggle('chosen', a === model.head);
    });
  }

  function drawLegend(over, step) {
    var ul = $('heat-legend');
    ul.textContent = '';
    var items = [['hatch', 'hatched grey: masked (score \u2212\u221E, weight 0)']];
    over.forEach(function (k) { items.push([k, OVERLAYS[k].text]); });
    if (step > 1) items.push(['ticks', 'every ' + step + ' tokens labelled; hover a cell for its tokens']);
    items.forEach(function (it) {
      var li = document.createElement('li');
      li.dataset.overlay = it[0];
      var sw = document.createElement('span');
      sw.className = 'swatch swatch-' + it[0];
      sw.setAttribute('aria-hidden', 'true');
      if (OVERLAYS[it[0]]) sw.style.borderColor = OVERLAYS[it[0]].colour;
      li.appendChild(sw);
      li.appendChild(document.createTextNode(it[1]));
      ul.appendChild(li);
    });
  }

  /* hovering a map cell names its tokens and weight (rows: queries, columns: keys) */
  function labelCell(cv, h) {
    return function (e) {
      var r = cv.getBoundingClientRect(), res = model.res, cell = Number(cv.dataset.cell);
      var scale = r.width / parseFloat(cv.style.width);
      var j = Math.floor(((e.clientX - r.left) / scale - Number(cv.dataset.ox)) / cell);
      var i = Math.floor(((e.clientY - r.top) / scale - Number(cv.dataset.oy)) / cell);
      if (i < 0 || j < 0 || i >= res.meta.n || j >= res.meta.L) { cv.title = ''; return; }
      var w = perHead(res.weights, h)[i][j];
      cv.title = labelsOf('q', res.meta.n)[i] + ' \u2192 ' + labelsOf('k', res.meta.L)[j] + ': ' +
        (perHead(res.scores, h)[i][j] === null ? 'masked' : f6(w));
    };
  }

  /* The keyboard's way into head h's map cv: a tab stop whose arrow keys
   * (Home, End: the row's first and last key) move a cursor cell and
   * write "query → key: weight" into out, a live region. base is the
   * map's pixels without the cursor. */
  function readCells(cv, out, h, base) {
    var at = [0, 0];
    cv.tabIndex = 0;
    function show() {
      var res = model.res, i = at[0], j = at[1], cell = Number(cv.dataset.cell);
      var g = cv.getContext('2d'), dpr = cv.width / parseFloat(cv.style.width);
      g.putImageData(base, 0, 0);
      g.save();
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      g.strokeStyle = '#111827';
      g.lineWidth = 2;
      g.setLineDash([]);
      g.strokeRect(Number(cv.dataset.ox) + j * cell + 1, Number(cv.dataset.oy) + i * cell + 1,
        Math.max(1, cell - 2), Math.max(1, cell - 2));
      g.restore();
      out.textContent = labelsOf('q', res.meta.n)[i] + ' \u2192 ' + labelsOf('k', res.meta.L)[j] + ': ' +
        (perHead(res.scores, h)[i][j] === null ? 'masked (score \u2212\u221E, weight 0)'
          : f6(perHead(res.weights, h)[i][j]));
    }
    cv.addEventListener('focus', show);
    cv.addEventListener('blur', function () { cv.getContext('2d').putImageData(base, 0, 0); });
    cv.addEventListener('keydown', function (e) {
      var n = model.res.meta.n, L = model.res.meta.L, i = at[0], j = at[1];
      if (e.key === 'ArrowUp') i--;
      else if (e.key === 'ArrowDown') i++;
      else if (e.key === 'ArrowLeft') j--;
      else if (e.key === 'ArrowRight') j++;
      else if (e.key === 'Home') j = 0;
      else if (e.key === 'End') j = L - 1;
      else return;
      e.preventDefault();
      at = [Math.max(0, Math.min(n - 1, i)), Math.max(0, Math.min(L - 1, j))];
      show();
    });
  }

  function drawRowStats() {
    var res = model.res, st = res.stats, h = model.head, n = res.meta.n;
    var ent = perHead(st.entropy, h), mass = perHead(st.mass, h), am = perHead(st.argmax, h);
    var qs = labelsOf('q', n), ks = labelsOf('k', res.meta.L);
    var tb = $('row-stats');
    tb.textContent = '';
    for (var i = 0; i < n; i++) {
      var tr = document.createElement('tr');
      /* attnd's entropy and mass of a row with no allowed key are 0, its argmax null */
      [qs[i], f3(ent[i]), f3(mass[i]), am[i] === null ? 'no allowed key' : ks[am[i]]].forEach(function (t, c) {
        var td = document.createElement(c ? 'td' : 'th');
        if (!c) td.scope = 'row';
        td.textContent = t;
        tr.appendChild(td);
      });
      tb.appendChild(tr);
    }
  }

  /* ---- wiring ---------------------------------------------------------- */
  function init() {
    A = window.attnd;
    if (!A || !$('paste')) return;
    $('paste').value = JSON.stringify(exampleRequest());
    $('paste-draw').addEventListener('click', drawModel);
    $('model-head').addEventListener('change', function (e) {
      model.head = Number(e.target.value);
      model.hover = -1;
      drawHeadView();
      drawRowStats();
      markChosen();
    });
    A.onServerChange(drawModel);
    drawModel();
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();

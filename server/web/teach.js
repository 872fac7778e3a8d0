/*
 * server/web/teach.js — the looking-and-dragging views of the teaching page:
 * the d_k = 2 plane (q, keys, b_Q, b_K as draggable arrows, each key with its
 * weight drawn as a bar beside its tip and repeated as a list of bars,
 * the sentence with /v1/verify's numbers), the step-by-step stepper of one
 * query row (built from the API's qk, scores, lse, weights and output), the
 * quiet-heads and scale sliders. model.js draws pasted model requests.
 * Every number drawn is attnd's: the page only draws what /v1/attention
 * returns. Calls go through app.js (window.attnd).
 */
(function () {
  'use strict';
  var A = null;                       /* window.attnd, set in init */
  function $(id) { return document.getElementById(id); }
  var SVGNS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, parent) {
    var e = document.createElementNS(SVGNS, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(e);
    return e;
  }
  function f6(x) { return A.fmt(x); }
  function f3(x) { return x === null || x === undefined ? 'masked' : Number(x).toFixed(3); }
  /* the drawing helpers model.js shares (it loads after this file) */
  window.attndDraw = { $: $, svg: svg, f3: f3 };

  /* ---- the plane ------------------------------------------------------ */
  var geo = {
    q: [1, 0], k: [[1, 0], [0, 1], [-1, 0]], bq: [0, 1], bk: [3, -2],
    useBq: false, useBk: false, softmax: 'standard', scale: 1 / Math.sqrt(2), shift: 0,
    res: null, ver: null, seq: 0, busy: false, again: false
  };
  var R = 4.5, SIZE = 360;            /* world [-R, R]^2 drawn in SIZE px */
  function toPx(v) { return [SIZE / 2 + v[0] * SIZE / (2 * R), SIZE / 2 - v[1] * SIZE / (2 * R)]; }
  function toWorld(px, py) {
    return [(px - SIZE / 2) * 2 * R / SIZE, (SIZE / 2 - py) * 2 * R / SIZE];
  }
  function add(a, b) { return [a[0] + b[0], a[1] + b[1]]; }
  function round2(v) { return [Math.round(v[0] * 100) / 100, Math.round(v[1] * 100) / 100]; }

  var HANDLES = [
    { id: 'q', label: 'query q', colour: '#1d4ed8' },
    { id: 'k0', label: 'key k1', colour: '#166534' },
    { id: 'k1', label: 'key k2', colour: '#166534' },
    { id: 'k2', label: 'key k3', colour: '#166534' },
    { id: 'bq', label: 'query bias b_Q', colour: '#7c2d12' },
    { id: 'bk', label: 'key bias b_K', colour: '#6b21a8' }
  ];
  function getVec(id) {
    if (id === 'q') return geo.q;
    if (id === 'bq') return geo.bq;
    if (id === 'bk') return geo.bk;
    return geo.k[Number(id.slice(1))];
  }
  /* Every tip stays in the plane, where it can be seen and dragged: a
   * bias's (drawn from q's or k1's tip) and so q's and k1's with the bias
   * drawn from them, which stop where that bias's tip meets the edge. */
  function setVec(id, v) {
    var base = baseOf(id), bias = id === 'q' ? geo.bq : id === 'k0' ? geo.bk : null;
    v = round2(v.map(function (x, c) {
      var lo = -R - base[c], hi = R - base[c];
      if (bias) { lo = Math.max(lo, -R - bias[c]); hi = Math.min(hi, R - bias[c]); }
      return Math.max(lo, Math.min(hi, x));
    }));
    if (id === 'q') geo.q = v;
    else if (id === 'bq') geo.bq = v;
    else if (id === 'bk') geo.bk = v;
    else geo.k[Number(id.slice(1))] = v;
  }
  /* where a handle is drawn: b_K's arrow starts at k1's tip, b_Q's at q's */
  function tipOf(id) {
    if (id === 'bq') return add(geo.q, geo.bq);
    if (id === 'bk') return add(geo.k[0], geo.bk);
    return getVec(id);
  }
  function baseOf(id) {
    if (id === 'bq') return geo.q;
    if (id === 'bk') return geo.k[0];
    return [0, 0];
  }

  function geoBody(extra) {
    var body = {
      q: [geo.q], k: geo.k, v: [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
      scale: geo.scale, softmax: geo.softmax,
      return: ['qk', 'scores', 'weights', 'output', 'lse', 'stats'],
      tokens: { q: ['q'], k: ['k1', 'k2', 'k3'] }
    };
    var bias = {};
    if (geo.useBq) bias.q = geo.bq;
    if (geo.useBk) bias.k = geo.bk;
    if (bias.q || bias.k) body.bias = bias;
    if (geo.shift) body.attn_bias = [[geo.shift, geo.shift, geo.shift]];
    Object.keys(extra || {}).forEach(function (k) { body[k] = extra[k]; });
    return body;
  }

  function drawPlane() {
    var s = $('geo-svg');
    while (s.firstChild) s.removeChild(s.firstChild);
    svg('title', {}, s).textContent = 'The d_k = 2 plane: q, the keys and the biases as arrows';
    var defs = svg('defs', {}, s);
    HANDLES.forEach(function (h) {
      var m = svg('marker', { id: 'tip-' + h.id, viewBox: '0 0 10 10', refX: 9, refY: 5,
        markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' }, defs);
      svg('path', { d: 'M0,0 L10,5 L0,10 z', fill: h.colour }, m);
    });
    for (var g = -4; g <= 4; g++) {
      var a = toPx([g, -R]), b = toPx([g, R]), c = toPx([-R, g]), d = toPx([R, g]);
      var w = g === 0 ? 1.5 : 0.5;
      svg('line', { x1: a[0], y1: a[1], x2: b[0], y2: b[1], stroke: '#9ca3af', 'stroke-width': w }, s);
      svg('line', { x1: c[0], y1: c[1], x2: d[0], y2: d[1], stroke: '#9ca3af', 'stroke-width': w }, s);
    }
    /* the effective vectors the dot products see, dashed */
    var qe = geo.useBq ? add(geo.q, geo.bq) : geo.q;
    var o = toPx([0, 0]);
    geo.k.forEach(function (k) {
      if (!geo.useBk) return;
      var e = toPx(add(k, geo.bk));
      svg('line', { x1: o[0], y1: o[1], x2: e[0], y2: e[1], stroke: '#166534',
        'stroke-dasharray': '4 3', 'stroke-width': 1.2 }, s);
    });
    if (geo.useBq) {
      var eq = toPx(qe);
      svg('line', { x1: o[0], y1: o[1], x2: eq[0], y2: eq[1], stroke: '#1d4ed8',
        'stroke-dasharray': '4 3', 'stroke-width': 1.2 }, s);
    }
    var taken = HANDLES.map(function (h) {     /* the handles' circles */
      var p = toPx(tipOf(h.id));
      return [p[0] - 11, p[1] - 11, p[0] + 11, p[1] + 11, h.id];
    });
    /* where each handle's label goes (a key's carries its weight bar on a
     * second line), then three layers: the labels' white backings, the
     * arrows over them, the texts, bars and draggable circles on top */
    var drawn = HANDLES.map(function (h) {
      var v = getVec(h.id), key = h.id.charAt(0) === 'k';
      var text = h.label.replace(/^(query|key) (bias )?/, '') + ' (' + v[0] + ', ' + v[1] + ')';
      var p1 = toPx(tipOf(h.id));
      return { h: h, v: v, key: key, text: text, p0: toPx(baseOf(h.id)), p1: p1,
        on: (h.id !== 'bq' || geo.useBq) && (h.id !== 'bk' || geo.useBk),
        at: placeLabel(p1, key ? Math.max(text.length * 7, BAR_W + 40) : text.length * 7,
          key ? 29 : 13, taken, h.id) };
    });
    drawn.forEach(function (d) {          /* keeps grid lines off the text */
      svg('rect', { x: d.at[0] - 2, y: d.at[1] - 1, width: d.at[2] - d.at[0] + 4,
        height: d.at[3] - d.at[1] + 2, rx: 3, fill: '#fff', 'fill-opacity': 0.85 }, s);
    });
    drawn.forEach(function (d) {
      svg('line', { x1: d.p0[0], y1: d.p0[1], x2: d.p1[0], y2: d.p1[1], stroke: d.h.colour,
        'stroke-width': 2.5, 'marker-end': 'url(#tip-' + d.h.id + ')', opacity: d.on ? 1 : 0.3 }, s);
    });
    drawn.forEach(function (d) {
      var h = d.h, v = d.v, on = d.on, p1 = d.p1;
      var t = svg('text', { x: d.at[0], y: d.at[1] + 10, fill: h.colour, 'font-size': 13,
        opacity: on ? 1 : 0.75, 'paint-order': 'stroke', stroke: '#fff', 'stroke-width': 3,
        class: 'handle-label', 'data-label': h.id }, s);
      t.textContent = d.text;
      if (d.key) keyBar(s, Number(h.id.slice(1)), d.at[0], d.at[1] + 17);
      var c = svg('circle', { cx: p1[0], cy: p1[1], r: 11, fill: h.colour, 'fill-opacity': on ? 0.25 : 0.1,
        stroke: h.colour, 'stroke-width': 1.5, tabindex: 0, role: 'slider',
        'aria-label': h.label + ', drag or use the arrow keys',
        'aria-valuetext': '(' + v[0] + ', ' + v[1] + ')' + (on ? '' : ', switched off'),
        'aria-valuenow': v[0], 'aria-valuemin': -R, 'aria-valuemax': R,
        class: 'handle', 'data-handle': h.id }, s);
      c.addEventListener('pointerdown', startDrag);
      c.addEventListener('keydown', keyMove);
    });
    showKeyBars();
  }

  /* Key j's weight bar at (x, y): a track BAR_W px long for weight 1, a
   * filled bar BAR_W·p_j long and p_j's value, p_j being attnd's weight
   * (filled in by showKeyBars from the last answer). */
  var BAR_W = 56, BAR_H = 8;
  function keyBar(s, j, x, y) {
    var g = svg('g', { class: 'key-bar', 'data-key': j, role: 'img' }, s);
    svg('rect', { x: x, y: y, width: BAR_W, height: BAR_H, fill: '#fff', stroke: '#6b7280',
      'stroke-width': 1, class: 'key-bar-track' }, g);
    svg('rect', { x: x, y: y, width: 0, height: BAR_H, fill: '#166534', class: 'key-bar-fill' }, g);
    svg('text', { x: x + BAR_W + 4, y: y + BAR_H, fill: '#1f2937', 'font-size': 11,
      class: 'key-bar-num' }, g);
  }
  function showKeyBars() {
    var w = geo.res && geo.res.weights[0];
    document.querySelectorAll('#geo-svg .key-bar').forEach(function (g) {
      var j = Number(g.getAttribute('data-key')), p = w ? w[j] : null;
      g.querySelector('.key-bar-fill').setAttribute('width', p === null ? 0 : BAR_W * p);
      g.querySelector('.key-bar-num').textContent = w ? f3(p) : '…';
      g.setAttribute('aria-label', 'weight of key k' + (j + 1) + ': ' + (w ? f6(p) : 'not known yet'));
      g.setAttribute('data-weight', p === null ? 'null' : String(p));
    });
  }

  /* A label of width w and height h (px) beside tip p: the first of eight
   * spots around it that stays in the plane and clear of every handle and
   * label placed so far (taken: boxes [x0, y0, x1, y1, owner]); returns
   * its top-left corner and takes its box. */
  function placeLabel(p, w, h, taken, id) {
    var spots = [[14, -6], [14, -h - 9], [14, 10], [-14 - w, -6], [-14 - w, -h - 9], [-14 - w, 10],
                 [-w / 2, 14], [-w / 2, -h - 15]];
    var best = null;
    for (var k = 0; k < spots.length && !best; k++) {
      var x = p[0] + spots[k][0], y = p[1] + spots[k][1], box = [x, y, x + w, y + h];
      if (x < 2 || y < 2 || x + w > SIZE - 2 || y + h > SIZE - 2) continue;
      var clear = taken.every(function (b) {
        return b[4] === id || box[2] <= b[0] || box[0] >= b[2] || box[3] <= b[1] || box[1] >= b[3];
      });
      if (clear) best = box;
    }
    if (!best) {                      /* crowded: the first spot, clamped into the plane */
      var bx = Math.max(2, Math.min(SIZE - 2 - w, p[0] + 14)), by = Math.max(2, Math.min(SIZE - 2 - h, p[1] - 6));
      best = [bx, by, bx + w, by + h];
    }
    taken.push(best.concat(['label-' + id]));
    return best;
  }

  var dragging = null;
  function startDrag(e) {
    dragging = e.target.getAttribute('data-handle');
    e.target.setPointerCapture(e.pointerId);
    e.target.addEventListener('pointermove', moveDrag);
    e.target.addEventListener('pointerup', endDrag);
    e.preventDefault();
  }
  function pointerWorld(e) {
    var r = $('geo-svg').getBoundingClientRect();
    return toWorld((e.clientX - r.left) * SIZE / r.width, (e.clientY - r.top) * SIZE / r.height);
  }
  function moveDrag(e) {
    if (!dragging) return;
    var w = pointerWorld(e), base = baseOf(dragging);
    setVec(dragging, [w[0] - base[0], w[1] - base[1]]);
    drawPlane();
    var c = document.querySelector('[data-handle="' + dragging + '"]');
    if (c) {                          /* keep the captured pointer on the redrawn handle */
      c.setPointerCapture(e.pointerId);
      c.addEventListener('pointermove', moveDrag);
      c.addEventListener('pointerup', endDrag);
    }
    requestGeo();
  }
  function endDrag() {
    dragging = null;
    requestGeo();
  }
  function keyMove(e) {
    var id = e.target.getAttribute('data-handle');
    var step = e.shiftKey ? 0.5 : 0.1, d = null;
    if (e.key === 'ArrowLeft') d = [-step, 0];
    if (e.key === 'ArrowRight') d = [step, 0];
    if (e.key === 'ArrowUp') d = [0, step];
    if (e.key === 'ArrowDown') d = [0, -step];
    if (!d) return;
    e.preventDefault();
    setVec(id, add(getVec(id), d));
    drawPlane();
    var c = document.querySelector('[data-handle="' + id + '"]');
    if (c) c.focus();
    requestGeo();
  }

  /* One request at a time; a change during it asks for one more. */
  function requestGeo() {
    if (geo.busy) { geo.again = true; return; }
    geo.busy = true;
    document.body.dataset.geoBusy = '1';
    var body = geoBody();
    var ver = { q: body.q, k: body.k, v: body.v, scale: geo.scale, softmax: geo.softmax,
                bias: { q: geo.bq, k: geo.bk } };
    Promise.all([A.api('POST', '/v1/attention', body),
                 A.api('POST', '/v1/verify', ver).then(null, function () { return null; })])
      .then(function (both) {
        geo.res = both[0];
        geo.ver = both[1];
        geo.sent = body;
        A.fillError($('geo-error'), null);
        drawWeights();
        drawSteps();
        drawQuiet();
      }, geoFailed)
      .then(function () {
        geo.busy = false;
        if (geo.again) { geo.again = false; requestGeo(); return; }
        document.body.dataset.geoBusy = '0';
        document.body.dataset.geoRounds = String(Number(document.body.dataset.geoRounds || 0) + 1);
      });
  }

  /* The plane's request failed: its error beside the weights, and the
   * weights, bars, stages and quiet-heads masses of the vectors before
   * taken down, so they are not read as those of the vectors drawn now. */
  function geoFailed(e) {
    geo.res = null;
    A.fillError($('geo-error'), e);
    ['geo-bars', 'geo-stats', 'geo-why'].forEach(function (id) { $(id).textContent = ''; });
    showKeyBars();
    drawSteps();
    quietSeq++;                       /* a round still on its way is of the vectors before */
    quietDown();
  }

  function check(name) {
    var c = geo.ver && geo.ver.checks;
    for (var i = 0; c && i < c.length; i++) if (c[i].name === name) return c[i];
    return null;
  }

  function drawWeights() {
    var w = geo.res.weights[0], box = $('geo-bars');
    box.textContent = '';
    w.forEach(function (p, j) {
      var row = document.createElement('div');
      row.className = 'bar-row';
      var lab = document.createElement('span');
      lab.className = 'bar-label';
      lab.textContent = 'k' + (j + 1);
      var bar = document.createElement('span');
      bar.className = 'bar';
      bar.style.width = (100 * p).toFixed(2) + '%';
      bar.setAttribute('aria-hidden', 'true');
      var num = document.createElement('span');
      num.className = 'bar-num';
      num.textContent = f6(p);
      num.dataset.weight = String(p);
      row.appendChild(lab);
      row.appendChild(bar);
      row.appendChild(num);
      box.appendChild(row);
    });
    var st = geo.res.stats;
    $('geo-stats').textContent = 'Row entropy ' + f6(st.entropy[0]) + ' nats, mass Σp = ' +
      f6(st.mass[0]) + ', largest weight on k' + (st.argmax[0] + 1) + '.';
    $('geo-why').textContent = whySentence();
    showKeyBars();
    drawHalf(check('beit_key_bias_float16'));
  }

  /* /v1/verify's float16 check of a large common key bias (BEiT): for each
   * size of b_K, how far the float16 weights drift from float64's without
   * the bias, and how far float64's own move (rounding only) */
  function sig3(x) {
    if (x === null || x === undefined) return 'overflow';
    x = Number(x);
    return x === 0 ? '0' : Math.abs(x) < 1e-3 ? x.toExponential(2) : x.toPrecision(3);
  }
  function drawHalf(c) {
    var box = $('geo-half');
    box.hidden = !c || !c.data || !c.data.bk_size;
    box.textContent = '';
    if (box.hidden) return;
    var d = c.data, top = 0;
    d.weight_error_float16.forEach(function (x) { if (x !== null) top = Math.max(top, x); });
    var head = document.createElement('p');
    head.className = 'help';
    head.textContent = 'Check ' + c.id + ' (' + c.name + ') ' + (c.passed ? 'holds' : 'fails') +
      ': with a large common key bias b_K, float16 rounds k + b_K and the weights drift; ' +
      'float64\'s stay put, as the bias cancels.';
    box.appendChild(head);
    var tb = A.newTable('half-table', 'max |Δp| against the weights without b_K',
      ['|b_K|', 'float16', 'float64']);
    d.bk_size.forEach(function (size, r) {
      var row = document.createElement('tr');
      var th = document.createElement('th');
      th.scope = 'row';
      th.textContent = String(size);
      row.appendChild(th);
      [d.weight_error_float16[r], d.weight_change_float64[r]].forEach(function (x, col) {
        var td = document.createElement('td');
        td.dataset.value = x === null ? 'null' : String(x);
        td.dataset.col = col ? 'float64' : 'float16';
        if (!col && x !== null && top > 0) {
          var bar = document.createElement('span');
          bar.className = 'half-bar';
          bar.style.width = (3 * x / top).toFixed(2) + 'rem';
          bar.setAttribute('aria-hidden', 'true');
          td.appendChild(bar);
        }
        td.appendChild(document.createTextNode(sig3(x)));
        row.appendChild(td);
      });
      tb.appendChild(row);
    });
    box.appendChild(tb.parentNode);
    if (d.overflow_size > 0) {
      var of = document.createElement('p');
      of.className = 'help';
      of.textContent = 'From |b_K| = ' + d.overflow_size + ' a float16 score overflows.';
      box.appendChild(of);
    }
  }

  /* why the weights moved or did not, in one sentence with verify's numbers */
  function whySentence() {
    var c2 = check('k_bias_row_constant'), c3 = check('k_bias_weights_unchanged');
    var c4 = check('q_bias_relative_scores');
    var shift = geo.scale * (geo.q[0] * geo.bk[0] + geo.q[1] * geo.bk[1]);
    if (geo.useBk && !geo.useBq) {
      if (geo.softmax === 'standard')
        return 'b_K adds the same ' + f6(shift) + ' (scale·q·b_K) to every score of the row, ' +
          'and softmax cancels a common shift: the weights stay put (/v1/verify check ' +
          (c3 ? c3.id : 3) + ': max |Δp| = ' + (c3 ? A.fmtDiff(c3.max_abs_diff) : '?') + ', row constant ' +
          (c2 && c2.data.row_constant ? f6([].concat(c2.data.row_constant)[0]) : f6(shift)) + ').';
      return 'b_K still adds one constant ' + f6(shift) + ' per row, but softmax1\'s extra 1 ' +
        'does not shift with it, so the weights change (check 10 softmax1_not_shift_invariant).';
    }
    if (geo.useBq) {
      var dc = c4 && c4.data.difference_change ? [].concat(c4.data.difference_change) : null;
      return 'b_Q adds scale·b_Q·k_j, a different amount for each key, so the relative scores ' +
        'and the weights change (/v1/verify check ' + (c4 ? c4.id : 4) + ': the k2−k1 score ' +
        'difference moves by ' + (dc ? f6(Number([].concat(dc[0])[1])) : '?') + ', as scale·b_Q·(k2−k1) predicts).';
    }
    return 'No bias: the weights are softmax(scale·q·k_j). Switch b_K on and drag it — the ' +
      'weights do not move; drag b_Q — they do.';
  }

  /* ---- step by step ---------------------------------------------------- */
  var stage = 0;
  var STAGES = ['qk', 'scaled', 'softcap', 'bias', 'mask', 'softmax', 'weights', 'output'];
  function stageRows() {
    var r = geo.res, m = r.meta, qk = r.qk[0], s = r.scores[0];
    var scaled = qk.map(function (x) { return x * m.scale; });
    var extra = m.softmax === 'softmax1' ? '1 + ' : m.softmax === 'sink' ? 'e^sink + ' : '';
    return [
      { id: 'qk', title: '1. q·k', formula: 'q_i·k_j after the biases (and RoPE)', vals: qk },
      { id: 'scaled', title: '2. × scale', formula: '× ' + f6(m.scale) + ' (1/√d_k unless set)', vals: scaled },
      { id: 'softcap', title: '3. softcap', formula: m.softcap ? 'c·tanh(s/c), c = ' + m.softcap : 'off: unchanged', vals: scaled },
      { id: 'bias', title: '4. + attention bias / ALiBi', formula: 's_ij = step 3 + attn_bias_ij − slope·|i−j|', vals: s },
      { id: 'mask', title: '5. mask', formula: 'keys not allowed become −∞ (shown as "masked")', vals: s },
      { id: 'softmax', title: '6. softmax denominator', formula: 'D = ' + extra + 'Σ_j e^s_j = e^lse',
        vals: [Math.exp(r.lse[0])], note: 'lse = ' + f6(r.lse[0]) },
      { id: 'weights', title: '7. weights', formula: 'p_j = e^s_j / D', vals: r.weights[0] },
      { id: 'output', title: '8. output', formula: 'Σ_j p_j v_j (v = one-hot rows)', vals: r.output[0] }
    ];
  }
  function drawSteps() {
    var box = $('steps-rows');
    box.textContent = '';
    if (!geo.res) {                   /* the last request failed: nothing to step through */
      $('steps-now').textContent = '';
      $('step-prev').disabled = true;
      $('step-next').disabled = true;
      return;
    }
    stageRows().forEach(function (st, i) {
      var row = document.createElement('div');
      row.className = 'stage' + (i === stage ? ' current' : '') + (i > stage ? ' later' : '');
      row.dataset.stage = st.id;
      if (i === stage) row.setAttribute('aria-current', 'step');
      var h = document.createElement('span');
      h.className = 'stage-title';
      h.textContent = st.title;
      var f = document.createElement('span');
      f.className = 'stage-formula';
      f.textContent = st.formula + (st.note ? ' (' + st.note + ')' : '');
      var v = document.createElement('span');
      v.className = 'stage-vals';
      st.vals.forEach(function (x) {
        var c = document.createElement('span');
        c.className = 'num';
        c.textContent = i > stage ? '…' : f6(x);
        c.dataset.value = x === null ? 'null' : String(x);
        v.appendChild(c);
      });
      row.appendChild(h);
      row.appendChild(f);
      row.appendChild(v);
      box.appendChild(row);
    });
    $('steps-now').textContent = 'Stage ' + (stage + 1) + ' of ' + STAGES.length + ': ' +
      stageRows()[stage].title.replace(/^\d+\. /, '') + '.';
    A.disable('step-prev', stage === 0, 'step-next');
    A.disable('step-next', stage === STAGES.length - 1, 'step-prev');
  }

  /* ---- quiet heads ---------------------------------------------------- */
  /* Not waited for by requestGeo, so the answers of two rounds may come
   * back in either order: only the latest round's are drawn. */
  var quietSeq = 0;
  function drawQuiet() {
    var my = ++quietSeq;
    var body = geoBody({ return: ['stats'], softmax: 'softmax1' });
    var body0 = geoBody({ return: ['stats'], softmax: 'standard' });
    Promise.all([A.api('POST', '/v1/attention', body), A.api('POST', '/v1/attention', body0)])
      .then(function (both) {
        if (my !== quietSeq) return;
        var m1 = both[0].stats.mass[0], m0 = both[1].stats.mass[0];
        $('quiet-mass1').textContent = f6(m1);
        $('quiet-mass1').dataset.mass = String(m1);
        $('quiet-mass0').textContent = f6(m0);
        $('quiet-mass0').dataset.mass = String(m0);
        $('quiet-bar1').style.width = (100 * m1).toFixed(1) + '%';
        $('quiet-bar0').style.width = (100 * m0).toFixed(1) + '%';
      }, function (e) {
        if (my !== quietSeq) return;
        quietDown();
        A.fillError($('geo-error'), e);
      }).then(function () {             /* rounds answered, drawn or not */
        document.body.dataset.quietRounds = String(Number(document.body.dataset.quietRounds || 0) + 1);
      });
  }
  /* no masses known for the vectors drawn */
  function quietDown() {
    ['quiet-mass1', 'quiet-mass0'].forEach(function (id) { $(id).textContent = '…'; delete $(id).dataset.mass; });
    $('quiet-bar1').style.width = '0';
    $('quiet-bar0').style.width = '0';
  }


  /* ---- wiring ---------------------------------------------------------- */
  function init() {
    A = window.attnd;
    if (!A || !$('geo-svg')) return;
    $('geo-use-bq').addEventListener('change', function (e) { geo.useBq = e.target.checked; drawPlane(); requestGeo(); });
    $('geo-use-bk').addEventListener('change', function (e) { geo.useBk = e.target.checked; drawPlane(); requestGeo(); });
    $('geo-softmax').addEventListener('change', function (e) { geo.softmax = e.target.value; requestGeo(); });
    $('geo-scale').addEventListener('input', function (e) {
      geo.scale = Number(e.target.value);
      $('geo-scale-out').textContent = geo.scale.toFixed(2);
      e.target.setAttribute('aria-valuetext', geo.scale.toFixed(2));   /* not 16 digits read aloud */
      requestGeo();
    });
    $('quiet').addEventListener('input', function (e) {
      geo.shift = Number(e.target.value);
      $('quiet-out').textContent = geo.shift.toFixed(1);
      requestGeo();
    });
    $('step-prev').addEventListener('click', function () { if (stage > 0) { stage--; drawSteps(); } });
    $('step-next').addEventListener('click', function () { if (stage < STAGES.length - 1) { stage++; drawSteps(); } });
    A.onServerChange(requestGeo);
    drawPlane();
    requestGeo();
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();

/*
 * server/web/results.js — the Results section of the teaching page drawn
 * from one answer of POST /v1/attention: the scores, weights and output as
 * heat maps with attnd's meta line, and what changed since the previous
 * answer of the same shape (per query row, a common shift of the scores or
 * not; the largest change of the weights and of the output). The page only
 * compares two answers of attnd; it computes none. Plain JavaScript,
 * loaded after heat.js and before app.js; hands its functions over in
 * window.attndPage.
 */
(function () {
  'use strict';
  var P = window.attndPage = window.attndPage || {};
  var fmt = P.fmt, fmtDiff = P.fmtDiff, renderHeat = P.renderHeat;   /* heat.js */

  var prev = null;          /* last successful attention answer */

  function $(id) { return document.getElementById(id); }

  function labels(prefix, n) {
    var a = [];
    for (var i = 0; i < n; i++) a.push(prefix + (i + 1));
    return a;
  }

  function renderAttention(res) {
    var n = res.weights.length, L = res.weights[0].length, dv = res.output[0].length;
    var rows = labels('q', n);
    renderHeat($('map-scores'), res.scores, rows, labels('k', L), 'scores',
      'Scores: rows are queries, columns are keys');
    renderHeat($('map-weights'), res.weights, rows, labels('k', L), 'weights',
      'Weights: rows are queries, columns are keys');
    renderHeat($('map-output'), res.output, rows, labels('dim ', dv), 'output',
      'Output: rows are queries, columns are value dimensions');
    var m = res.meta || {};
    $('meta').textContent = 'scale = ' + fmt(m.scale) + ', softmax = ' + m.softmax +
      ', n = ' + m.n + ', L = ' + m.L + ', d_k = ' + m.d_k + ', d_v = ' + m.d_v +
      (m.empty_rows && m.empty_rows.length ? ', rows with no allowed key: ' + m.empty_rows.map(function (i) {
        return typeof i === 'number' ? rows[i] : JSON.stringify(i);   /* attnd counts from 0, the maps from q1 */
      }).join(', ') : '') +
      ' · computed in ' + m.elapsed_us + ' µs.';
  }

  /* ---- what changed since the last answer ----------------------------- */
  function sameShape(a, b) {
    return a && b && a.length === b.length &&
      a.every(function (r, i) { return r.length === b[i].length; });
  }

  function maxAbsDiff(a, b) {
    var d = 0;
    a.forEach(function (r, i) {
      r.forEach(function (x, j) {
        var y = b[i][j];
        if (typeof x === 'number' && typeof y === 'number') d = Math.max(d, Math.abs(x - y));
        else if (x !== y) d = Infinity;
      });
    });
    return d;
  }

  /* Per query row: did every score move by the same amount? */
  function scoreShift(a, b) {
    return a.map(function (r, i) {
      var deltas = [];
      r.forEach(function (x, j) {
        if (typeof x === 'number' && typeof b[i][j] === 'number') deltas.push(x - b[i][j]);
      });
      if (!deltas.length) return null;
      var lo = Math.min.apply(null, deltas), hi = Math.max.apply(null, deltas);
      return { common: hi - lo <= 1e-9 * Math.max(1, Math.abs(hi)), lo: lo, hi: hi };
    });
  }

  /* Fills the box of what changed; lastChange names the edit ("token
   * added"). Returns the status line's sentence about the weights, '' when
   * there is no earlier answer of the same shape to compare with. */
  function renderChanges(res, lastChange) {
    var box = $('changes');
    box.textContent = '';
    if (!prev || !sameShape(res.scores, prev.scores) || !sameShape(res.output, prev.output)) {
      prev = { scores: res.scores, weights: res.weights, output: res.output };
      return '';
    }
    var h = document.createElement('h3');
    h.textContent = 'What changed (' + lastChange + ')';
    box.appendChild(h);
    var ul = document.createElement('ul');
    var shifts = scoreShift(res.scores, prev.scores);
    shifts.forEach(function (s, i) {
      if (!s) return;
      var li = document.createElement('li');
      if (s.common && s.hi === 0) li.textContent = 'Row q' + (i + 1) + ': scores unchanged.';
      else if (s.common) {
        li.textContent = 'Row q' + (i + 1) + ': every score moved by the same ' +
          fmt(s.hi) + ' (a common shift of the row).';
      } else {
        li.textContent = 'Row q' + (i + 1) + ': scores moved by different amounts per key (from ' +
          fmt(s.lo) + ' to ' + fmt(s.hi) + '), so relative scores changed.';
      }
      ul.appendChild(li);
    });
    var dw = maxAbsDiff(res.weights, prev.weights);
    var dout = maxAbsDiff(res.output, prev.output);
    var lw = document.createElement('li');
    lw.id = 'weights-change';
    lw.dataset.maxAbsDiff = String(dw);
    lw.textContent = dw <= 1e-12
      ? 'Weights unchanged (largest |\u0394p| = ' + fmtDiff(dw) + ').'
      : 'Weights changed (largest |\u0394p| = ' + fmt(dw) + ').';
    ul.appendChild(lw);
    var lo = document.createElement('li');
    lo.textContent = dout <= 1e-12
      ? 'Output unchanged (largest |\u0394| = ' + fmtDiff(dout) + ').'
      : 'Output changed (largest |\u0394| = ' + fmt(dout) + ').';
    ul.appendChild(lo);
    box.appendChild(ul);
    prev = { scores: res.scores, weights: res.weights, output: res.output };
    return dw <= 1e-12 ? ' Weights unchanged.' : ' Weights changed.';
  }

  /* The worked example is back: the next answer is compared with none. */
  function forgetAnswer() { prev = null; }

  P.renderAttention = renderAttention; P.renderChanges = renderChanges;
  P.forgetAnswer = forgetAnswer;
})();

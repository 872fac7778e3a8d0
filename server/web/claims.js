/*
 * server/web/claims.js — the claims of the teaching page, from one answer
 * of /v1/verify: the lead sentence on what the chosen biases and softmax
 * do, the four bias cases of the chosen softmax with the chosen one marked,
 * the checks the learner is looking at given the toggles, the decode
 * section's check, and every check with its numbers and the count that
 * hold. The options come in as app.js reads them from the form ({bq, bk,
 * bv, sm, rope, n, causal}). Plain JavaScript, loaded after heat.js and
 * before app.js; hands its functions over in window.attndPage.
 */
(function () {
  'use strict';
  var P = window.attndPage = window.attndPage || {};
  var fmt = P.fmt, fmtDiff = P.fmtDiff, newTable = P.newTable;   /* heat.js */

  function $(id) { return document.getElementById(id); }

  /* When each check (by its stable name) is the one the learner is looking
   * at, given the toggles. */
  var TOPICS = {
    base_scores: function (o) { return !o.bq && !o.bk; },
    k_bias_row_constant: function (o) { return o.bk && !o.rope; },
    k_bias_weights_unchanged: function (o) { return o.bk && o.sm === 'standard' && !o.rope; },
    q_bias_relative_scores: function (o) { return o.bq; },
    q_bias_exception: function (o) { return o.bq; },
    four_term_decomposition: function (o) { return o.bq && o.bk; },
    every_query_row: function (o) { return (o.bq || o.bk) && o.n > 1; },
    softmax1_ratios: function (o) { return o.sm === 'softmax1' && !o.bk; },
    softmax1_not_shift_invariant: function (o) { return o.sm === 'softmax1' && o.bk; },
    softmax1_zero_key: function (o) { return o.sm === 'softmax1' && !o.bk; },
    softmax1_row_sums: function (o) { return o.sm === 'softmax1'; },
    sink_extra_key: function (o) { return o.sm === 'sink'; },
    v_bias_output_shift: function (o) { return o.bv; },
    rope_breaks_k_bias: function (o) { return o.rope && o.bk; }
  };

  function leadText(o) {
    var s = [];
    if (o.rope && o.bk) {
      s.push('RoPE rotates every key by its own position after the bias, so the K bias is no longer common to all keys: the weights can change.');
    } else if (o.bk && o.sm === 'standard') {
      s.push('A K bias common to all keys adds the same c = scale\u00B7q\u00B7b_K to every score of a row; standard softmax cancels a common shift, so the weights and the output stay the same.');
    } else if (o.bk) {
      s.push('Under ' + o.sm + ' the extra term in the denominator (1, or e^sink) does not move with the scores: a common shift keeps the ratios p\u2081/p\u2082 = e^(s\u2081\u2212s\u2082) but changes the weights.');
    }
    if (o.bq) {
      s.push('A Q bias adds scale\u00B7b_Q\u00B7k_j, which differs per key: relative scores change by scale\u00B7b_Q\u00B7(k\u2081\u2212k\u2082), so the weights can change.');
    }
    if (o.bv) {
      s.push('A V bias shifts the output by b_V (standard) or by (\u03A3p)\u00B7b_V (softmax1, sink).');
    }
    if (!o.bq && !o.bk && o.sm === 'softmax1') {
      s.push('softmax1 is standard attention with an extra zero-score option: the weights of a row add up to less than 1.');
    } else if (!o.bq && !o.bk && o.sm === 'sink') {
      s.push('sink is standard attention with an extra zero-value option whose score is the sink logit ' +
        '(not scaled): the weights of a row add up to less than 1.');
    }
    if (!s.length) s.push('No bias: these are the base scores s = scale\u00B7q\u00B7k and their softmax. Switch on the K bias, then the Q bias.');
    return s.join(' ');
  }

  function checkList(v) {
    if (Array.isArray(v)) return v;
    if (v && Array.isArray(v.checks)) return v.checks;
    return [];
  }

  function renderData(data) {
    var dl = document.createElement('dl');
    dl.className = 'check-data';
    Object.keys(data || {}).forEach(function (key) {
      var dt = document.createElement('dt');
      dt.textContent = key;
      var dd = document.createElement('dd');
      dd.textContent = JSON.stringify(data[key], function (k, x) {
        return typeof x === 'number' ? Number(fmt(x)) : x;
      });
      dl.appendChild(dt);
      dl.appendChild(dd);
    });
    return dl;
  }

  function renderCheck(c) {
    var div = document.createElement('div');
    var na = c.applicable === false;
    div.className = 'check ' + (na ? 'na' : c.passed ? 'pass' : 'fail');
    div.dataset.name = c.name;
    var h = document.createElement('h3');
    h.textContent = (na ? 'Not applicable here: ' : c.passed ? '\u2714 holds: ' : '\u2718 does not hold: ') + c.claim;
    div.appendChild(h);
    var p = document.createElement('p');
    p.className = 'check-nums';
    p.textContent = 'check ' + c.id + ' ' + c.name + ' \u00B7 passed: ' + c.passed +
      ' \u00B7 max_abs_diff = ' + fmtDiff(c.max_abs_diff) + ' (tolerance ' + fmtDiff(c.tolerance) + ')';
    div.appendChild(p);
    if (c.note) {
      var n = document.createElement('p');
      n.className = 'help';
      n.textContent = c.note;
      div.appendChild(n);
    }
    if (c.data && typeof c.data === 'object') {
      var d = document.createElement('details');
      var s = document.createElement('summary');
      s.textContent = 'The numbers of check ' + c.id;
      d.appendChild(s);
      d.appendChild(renderData(c.data));
      div.appendChild(d);
    }
    return div;
  }

  /* The seed's table: the four bias cases under the chosen softmax, with
   * the case the toggles select marked. /v1/verify takes no causal mask
   * and the table leaves RoPE out: under either the maps above hold other
   * weights, so the caption names what the table is without and the
   * marked row is not called the one shown above. */
  var CASES = { no_bias: 'no bias', q_bias: 'Q bias only', k_bias: 'K bias only', both: 'Q and K bias' };

  function renderCases(v, o) {
    var box = $('cases');
    box.textContent = '';
    var rows = v && v.table && v.table[o.sm];
    if (!rows) {
      box.textContent = 'No four-case table for the ' + o.sm + ' softmax.';
      return;
    }
    var now = o.bq && o.bk ? 'both' : o.bq ? 'q_bias' : o.bk ? 'k_bias' : 'no_bias';
    var without = (o.rope ? ', without RoPE' : '') + (o.causal ? ', without the causal mask' : '');
    var mark = without ? ' (the biases chosen above)' : ' (shown above)';
    var tbody = newTable('cases', 'The four bias cases (' + o.sm + ' softmax, query row q1' +
      without + ')',
      ['case', 'scores (s\u2081, s\u2082, \u2026)', 'weights (p\u2081, p\u2082, \u2026)']);
    var table = tbody.parentNode;
    rows.forEach(function (r) {
      var tr = document.createElement('tr');
      tr.dataset.condition = r.condition;
      if (r.condition === now) {
        tr.className = 'current';
        tr.setAttribute('aria-current', 'true');
      }
      var th = document.createElement('th');
      th.scope = 'row';
      th.textContent = (CASES[r.condition] || r.condition) + (r.condition === now ? mark : '');
      tr.appendChild(th);
      [r.scores, r.weights].forEach(function (m) {
        var td = document.createElement('td');
        td.textContent = '(' + (m && m[0] ? m[0].map(fmt).join(', ') : '') + ')';
        tr.appendChild(td);
      });
      tbody.appendChild(tr);
    });
    box.appendChild(table);
  }

  /* The claims of verify answer v under the options o. */
  function renderClaims(v, o) {
    $('claim-lead').textContent = leadText(o);
    renderCases(v, o);
    var checks = checkList(v);
    var dc = $('decode-check');
    dc.textContent = '';
    checks.forEach(function (c) {
      if (c.name === 'session_decode') dc.appendChild(renderCheck(c));
    });
    var chosen = checks.filter(function (c) {
      var t = TOPICS[c.name];
      return t && t(o);
    });
    var box = $('claim-checks');
    box.textContent = '';
    chosen.forEach(function (c) { box.appendChild(renderCheck(c)); });
    var all = $('all-checks');
    all.textContent = '';
    checks.forEach(function (c) { all.appendChild(renderCheck(c)); });
    /* a check that does not apply to these inputs neither holds nor fails */
    var applicable = checks.filter(function (c) { return c.applicable !== false; });
    var na = checks.length - applicable.length;
    $('all-checks-count').textContent = applicable.filter(function (c) { return c.passed; }).length +
      ' of ' + applicable.length + ' hold' + (na ? '; ' + na + ' not applicable' : '');
  }

  P.leadText = leadText;
  P.renderClaims = renderClaims;
})();

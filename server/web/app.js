/*
 * server/web/app.js — the behaviour of attnd's teaching page (index.html).
 *
 * Plain JavaScript, no libraries and no build step, so the page works
 * offline from the binary. The page holds the learner's inputs in `state`,
 * renders them as small editable grids, and after every change asks attnd:
 *   POST /v1/attention  scores, weights, output for the heat maps
 *   POST /v1/verify     the checks whose claim the learner is looking at
 * decode.js drives the decode section's session, teach.js the
 * looking-and-dragging views, model.js pasted model requests; they call
 * attnd and share the helpers here through window.attnd.
 * The parts it is built from load before it and hand their functions
 * over in window.attndPage: grid.js the editable grids, api.js the
 * calls to attnd and their errors as text, heat.js numbers as text,
 * the colour ramps, heat maps and tables, results.js the Results
 * section's maps and what changed since the last answer, claims.js the
 * claims of /v1/verify.
 * All arithmetic shown comes from attnd; the page only compares two answers
 * of attnd (what changed since the last edit) and colours the cells.
 * API errors ({"error":{"code","message","path"}}) are shown as text, and a
 * path that names a grid cell marks that cell invalid.
 */
'use strict';

(function () {
  /* the parts loaded before this file (window.attndPage) */
  var P = window.attndPage;
  var parseCell = P.parseCell, renderGrid = P.renderGrid;                 /* grid.js */
  var apiBase = P.apiBase, baseProblem = P.baseProblem, localError = P.localError,
      server = P.server, api = P.api, fillError = P.fillError;            /* api.js */
  var fmt = P.fmt, fmtDiff = P.fmtDiff, cellColour = P.cellColour,
      renderHeat = P.renderHeat, newTable = P.newTable;                   /* heat.js */
  var renderAttention = P.renderAttention, renderChanges = P.renderChanges,
      forgetAnswer = P.forgetAnswer;                                      /* results.js */
  var leadText = P.leadText, renderClaims = P.renderClaims;               /* claims.js */

  /* ---- the built-in worked example ---------------------------------- */
  var EXAMPLE = {
    q: [[1, 0]],
    k: [[1, 0], [0, 1], [-1, 0]],
    v: [[1, 0, 0], [0, 1, 0], [0, 0, 1]],   /* one-hot: output = weights */
    bq: [0, 1],
    bk: [3, -2],
    bv: [1, 0, 0]
  };

  var state = null;         /* {q,k,v,bq,bk,bv}: arrays of numbers (NaN = bad cell) */
  var lastChange = 'the worked example';
  var seq = 0;              /* ids of update rounds; stale answers are dropped */
  var timer = 0;

  function $(id) { return document.getElementById(id); }

  function clone(x) { return JSON.parse(JSON.stringify(x)); }

  /* ---- errors shown and the fields they name ------------------------ */
  /* The Results section's error box; a path naming a grid cell or an
   * option field marks it. */
  function showError(e) {
    clearInvalid();
    fillError($('error'), e, e && e.path ? markInvalid(e.path) : null);
  }

  /* The option fields behind the pointers of attnd's errors about what
   * commonOptions and attentionBody send; the first match wins, so
   * /rope/base is the base field and /rope (an odd d_k) the RoPE switch.
   * The softmax radios are marked as their group. */
  var OPTION_FIELDS = [
    { ptr: '/scale', id: 'scale', what: 'the custom scale' },
    { ptr: '/sink_logit', id: 'sink-logit', what: 'the sink logit' },
    { ptr: '/softmax', id: 'softmax-box', what: 'the softmax' },
    { ptr: '/causal', id: 'causal', what: 'the causal mask' },
    { ptr: '/rope/base', id: 'rope-base', what: 'the RoPE base' },
    { ptr: '/rope/pairs', id: 'rope-pairs', what: 'the RoPE pairs' },
    { ptr: '/rope', id: 'use-rope', what: 'RoPE' }
  ];

  /* Marks the option field ptr points at; its name, or null. */
  function markOption(ptr) {
    for (var i = 0; i < OPTION_FIELDS.length; i++) {
      var o = OPTION_FIELDS[i];
      if (ptr === o.ptr || ptr.indexOf(o.ptr + '/') === 0) {
        $(o.id).setAttribute('aria-invalid', 'true');
        return o.what;
      }
    }
    return null;
  }

  /* Unmarks the option fields but those on that hold no number. */
  function clearOptions() {
    OPTION_FIELDS.forEach(function (o) { $(o.id).removeAttribute('aria-invalid'); });
    badOption();
  }

  /* A JSON pointer such as /k/2/1 or /bias/q/0 names a grid cell, and
   * /scale or /rope/base an option field (whose name it returns). */
  function markInvalid(ptr) {
    var m = /^\/(q|k|v)\/(\d+)(?:\/(\d+))?/.exec(ptr) ||
            /^\/bias\/(q|k|v)(?:\/(\d+))?/.exec(ptr);
    if (!m) return markOption(ptr);
    var sel;
    if (ptr.indexOf('/bias/') === 0) {
      sel = '#grid-b' + m[1] + ' input' + (m[2] !== undefined ? '[data-c="' + m[2] + '"]' : '');
    } else {
      sel = '#grid-' + m[1] + ' input[data-r="' + m[2] + '"]' +
        (m[3] !== undefined ? '[data-c="' + m[3] + '"]' : '');
    }
    Array.prototype.forEach.call(document.querySelectorAll(sel), function (el) {
      el.setAttribute('aria-invalid', 'true');
    });
    return null;
  }

  /* The decode section's refused start (POST /v1/sessions takes the same
   * options and biases): its error in box, the field it names marked. */
  function showStartError(box, e) {
    fillError(box, e, e && e.path ? markInvalid(e.path) : null);
  }

  /* Unmarks the cells that hold a number: a mark of attnd's error path
   * goes, also on a cell of the named row the learner never typed in; a
   * cell that holds no number keeps its own mark. */
  function clearInvalid() {
    Array.prototype.forEach.call(document.querySelectorAll('.grid input[aria-invalid]'),
      function (el) { if (!isNaN(parseCell(el.value))) el.removeAttribute('aria-invalid'); });
    clearOptions();
  }

  /* ---- the inputs' grids ---------------------------------------------- */
  function renderInputs() {
    renderGrid($('grid-q'), state.q, 'Q', 'q', changed);
    renderGrid($('grid-k'), state.k, 'K', 'k', changed);
    renderGrid($('grid-v'), state.v, 'V', 'v', changed);
    renderGrid($('grid-bq'), state.bq, 'Q bias', '', changed);
    renderGrid($('grid-bk'), state.bk, 'K bias', '', changed);
    renderGrid($('grid-bv'), state.bv, 'V bias', '', changed);
    var dk = state.q[0].length, dv = state.v[0].length;
    $('dims').textContent = 'n = ' + state.q.length + ' queries, L = ' +
      state.k.length + ' tokens, d_k = ' + dk + ', d_v = ' + dv + '.';
    disable('q-del', state.q.length <= 1, 'q-add');
    disable('kv-del', state.k.length <= 1, 'kv-add');
    disable('dk-del', dk <= 1, 'dk-add');
    disable('dv-del', dv <= 1, 'dv-add');
    $('scale-help').textContent = 'Default: 1/\u221Ad_k = ' + fmt(1 / Math.sqrt(dk)) + '.';
    inputWatchers.forEach(function (fn) { fn(); });
  }

  /* Button id disabled (off) or not; a focused one being disabled hands
   * the focus to partner, where Chrome would drop it on the page and a
   * keyboard user would lose their place. teach.js's stepper too. */
  function disable(id, off, partner) {
    var el = $(id), had = document.activeElement === el;
    el.disabled = off;
    if (off && had) $(partner).focus();
  }

  function zeros(n) { var a = []; for (var i = 0; i < n; i++) a.push(0); return a; }

  function structural(fn, what) {
    return function () { fn(); renderInputs(); changed(what); };
  }

  function bindStructureButtons() {
    $('q-add').addEventListener('click', structural(function () {
      state.q.push(zeros(state.q[0].length));
    }, 'query row added'));
    $('q-del').addEventListener('click', structural(function () {
      if (state.q.length > 1) state.q.pop();
    }, 'query row removed'));
    $('kv-add').addEventListener('click', structural(function () {
      state.k.push(zeros(state.k[0].length));
      state.v.push(zeros(state.v[0].length));
    }, 'token added'));
    $('kv-del').addEventListener('click', structural(function () {
      if (state.k.length > 1) { state.k.pop(); state.v.pop(); }
    }, 'token removed'));
    $('dk-add').addEventListener('click', structural(function () {
      state.q.forEach(function (r) { r.push(0); });
      state.k.forEach(function (r) { r.push(0); });
      state.bq.push(0); state.bk.push(0);
    }, 'd_k widened'));
    $('dk-del').addEventListener('click', structural(function () {
      if (state.q[0].length <= 1) return;
      state.q.forEach(function (r) { r.pop(); });
      state.k.forEach(function (r) { r.pop(); });
      state.bq.pop(); state.bk.pop();
    }, 'd_k narrowed'));
    $('dv-add').addEventListener('click', structural(function () {
      state.v.forEach(function (r) { r.push(0); });
      state.bv.push(0);
    }, 'd_v widened'));
    $('dv-del').addEventListener('click', structural(function () {
      if (state.v[0].length <= 1) return;
      state.v.forEach(function (r) { r.pop(); });
      state.bv.pop();
    }, 'd_v narrowed'));
  }

  /* ---- options -> request bodies -------------------------------------- */
  function softmaxChoice() {
    var el = document.querySelector('input[name="softmax"]:checked');
    return el ? el.value : 'standard';
  }

  function numberOf(id) { return parseCell($(id).value); }

  /* The option fields that are on but hold no number (an <input
   * type=number> reads "" for "1e", "-" or "1e999"): sent, their null
   * would be taken as "not given" and attnd would use its default scale
   * or RoPE base while the field shows something else. Each is marked
   * aria-invalid; returns the first one's label, or null. */
  var NUMBER_OPTIONS = [
    { id: 'scale', what: 'the custom scale', on: function () { return $('use-scale').checked; } },
    { id: 'sink-logit', what: 'the sink logit', on: function () { return softmaxChoice() === 'sink'; } },
    { id: 'rope-base', what: 'the RoPE base', on: function () { return $('use-rope').checked; } }
  ];
  function badOption() {
    var first = null;
    NUMBER_OPTIONS.forEach(function (o) {
      var bad = o.on() && isNaN(numberOf(o.id));
      if (bad) $(o.id).setAttribute('aria-invalid', 'true');
      else $(o.id).removeAttribute('aria-invalid');
      if (bad && !first) first = o.what;
    });
    return first;
  }

  function badCells() {
    var all = [state.q, state.k, state.v, [state.bq], [state.bk], [state.bv]];
    return all.some(function (m) {
      return m.some(function (row) { return row.some(function (x) { return isNaN(x); }); });
    });
  }

  /* The options shared by /v1/attention and POST /v1/sessions. */
  function commonOptions(body) {
    var sm = softmaxChoice();
    body.softmax = sm;
    if (sm === 'sink') body.sink_logit = numberOf('sink-logit');
    if ($('use-scale').checked) body.scale = numberOf('scale');
    if ($('use-rope').checked) {
      body.rope = { base: numberOf('rope-base'), pairs: $('rope-pairs').value };
    }
    var bias = {};
    if ($('use-bq').checked) bias.q = state.bq;
    if ($('use-bk').checked) bias.k = state.bk;
    if ($('use-bv').checked) bias.v = state.bv;
    if (bias.q || bias.k || bias.v) body.bias = bias;
    return body;
  }

  function attentionBody() {
    var body = commonOptions({ q: state.q, k: state.k, v: state.v });
    var c = $('causal').value;
    if (c !== 'none') body.causal = c;
    return body;
  }

  /* /v1/verify examines what the bias vectors do, so it gets them whether
   * or not they are switched on for the heat maps. */
  function verifyBody() {
    var body = commonOptions({ q: state.q, k: state.k, v: state.v });
    body.bias = { q: state.bq, k: state.bk, v: state.bv };
    return body;
  }

  /* The toggles as claims.js reads them. */
  function optionsNow() {
    return {
      bq: $('use-bq').checked, bk: $('use-bk').checked, bv: $('use-bv').checked,
      sm: softmaxChoice(), rope: $('use-rope').checked, n: state.q.length,
      causal: $('causal').value !== 'none'
    };
  }

  /* ---- one update round ----------------------------------------------- */
  function setBusy(on) {
    document.body.dataset.busy = on ? '1' : '0';
    $('results').setAttribute('aria-busy', on ? 'true' : 'false');
  }

  /* The numbers of an earlier answer, taken down when the inputs now
   * shown are refused or hold no number, so they are not read as theirs:
   * the maps and their summary (maps true) and the checks of /v1/verify. */
  function takeDown(maps) {
    var ids = ['cases', 'claim-checks', 'decode-check', 'all-checks'];
    if (maps) ids = ids.concat(['map-scores', 'map-weights', 'map-output', 'meta', 'changes']);
    ids.forEach(function (id) { $(id).textContent = ''; });
    $('all-checks-count').textContent = '\u2026';
  }

  /* the statuses that say the body is at fault; a 401 (the API key), a
   * 503 (overload), a 504 (a deadline) and the like are not about the inputs */
  var REFUSALS = [400, 413, 415, 422];

  function update() {
    timer = 0;
    var opt = badOption(), where = baseProblem();
    if (badCells() || opt || where) {
      takeDown(true);
      showError(localError(opt ? opt + ' is not a number; fix the field marked in red.'
        : where || 'a cell does not hold a number, or one too large (past \u00B11.8e308); fix the cell marked in red.'));
      $('status').textContent = opt || !where ? 'Waiting for a valid number.' : 'Waiting for a valid API base URL.';
      setBusy(false);                 /* nothing is on its way: read the message out */
      document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
      return;
    }
    var my = ++seq;
    setBusy(true);
    /* the maps still hold the answer before this edit: not "Updated" */
    $('status').textContent = 'Computing (' + lastChange + ')\u2026';
    var att = api('POST', '/v1/attention', attentionBody());
    var ver = api('POST', '/v1/verify', verifyBody()).then(null, function (e) { return { failed: e }; });
    Promise.all([att, ver]).then(function (both) {
      if (my !== seq) return;
      var res = both[0], v = both[1];
      showError(null);
      renderAttention(res);
      var summary = renderChanges(res, lastChange);
      if (v && v.failed) {
        takeDown(false);
        $('claim-lead').textContent = leadText(optionsNow());
        $('claim-checks').textContent = 'The checks could not run: ' +
          (v.failed.code || '') + ' ' + (v.failed.message || '');
      } else {
        renderClaims(v, optionsNow());
      }
      $('status').textContent = 'Updated (' + lastChange + ').' + summary + weightsSaid(res.weights);
      document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
    }, function (e) {
      if (my !== seq) return;
      takeDown(true);
      showError(e);
      var why = String(e.message || e.code).replace(/\.$/, '') + '.';
      $('status').textContent = e.code === 'network' ? 'Not updated: attnd could not be reached.'
        : REFUSALS.indexOf(e.status) >= 0 ? 'attnd refused the inputs: ' + why
          : 'Not updated: attnd answered ' + e.status + ' ' + e.code + ': ' + why;
      document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
    }).then(function () { if (my === seq) setBusy(false); });
  }

  /* The weights as the status line reads them out: every number while
   * they are few (the worked example's three), else only their count, as
   * the live region is read whole after each edit. */
  var SAID_MAX = 8;
  function weightsSaid(w) {
    var count = w.length * w[0].length;
    if (count > SAID_MAX) return ' ' + w.length + ' \u00D7 ' + w[0].length + ' weights in the map below.';
    return ' Weights: ' + w.map(function (r, i) {
      return 'q' + (i + 1) + ': ' + r.map(fmt).join(', ');
    }).join('; ') + '.';
  }

  function changed(what) {
    if (typeof what === 'string') lastChange = what;
    seq++;   /* answers to requests sent before this edit are now stale */
    if (timer) clearTimeout(timer);
    setBusy(true);
    timer = setTimeout(update, 150);
  }

  /* ---- wiring ---------------------------------------------------------- */
  function describe(el) {
    var lab = document.querySelector('label[for="' + el.id + '"]');
    var name = el.dataset.name || (lab ? lab.textContent.trim() : el.id);
    if (el.type === 'checkbox') return name + (el.checked ? ' on' : ' off');
    if (el.type === 'radio') return 'softmax: ' + el.value;
    return name + ' = ' + el.value;
  }

  function bindOptions() {
    ['use-bq', 'use-bk', 'use-bv', 'sm-standard', 'sm-softmax1', 'sm-sink', 'causal',
      'use-scale', 'use-rope', 'rope-pairs'].forEach(function (id) {
      $(id).addEventListener('change', function () { changed(describe($(id))); });
    });
    ['sink-logit', 'scale', 'rope-base'].forEach(function (id) {
      $(id).addEventListener('input', function () {
        if (id === 'sink-logit' && softmaxChoice() !== 'sink') return;
        if (id === 'scale' && !$('use-scale').checked) return;
        if (id === 'rope-base' && !$('use-rope').checked) return;
        changed(describe($(id)));
      });
    });
    $('api-base').addEventListener('change', function () {
      fixLinks();
      changed('API base URL changed');
      serverChanged();
    });
    $('api-key').addEventListener('change', function () { changed('API key entered'); serverChanged(); });
    $('reset').addEventListener('click', function () { reset(); changed('back to the worked example'); });
    $('controls').addEventListener('submit', function (e) { e.preventDefault(); });
  }

  /* The other panels (teach.js, model.js, decode.js) ask again when the
   * learner points the page at another attnd or types the API key; the
   * decode section redraws its next token when the inputs change shape. */
  var serverWatchers = [];
  var inputWatchers = [];
  function onInputsChange(fn) { inputWatchers.push(fn); }
  function onServerChange(fn) { serverWatchers.push(fn); }
  function serverChanged() { serverWatchers.forEach(function (fn) { fn(); }); }

  /* Footer links follow the API base URL (a refused one leaves them be). */
  function fixLinks() {
    if (baseProblem()) return;
    Array.prototype.forEach.call(document.querySelectorAll('footer a'), function (a) {
      if (!a.dataset.path) a.dataset.path = a.getAttribute('href');
      a.href = apiBase() + a.dataset.path;
    });
  }

  function reset() {
    state = clone(EXAMPLE);
    forgetAnswer();
    $('use-bq').checked = false;
    $('use-bk').checked = false;
    $('use-bv').checked = false;
    $('sm-standard').checked = true;
    $('causal').value = 'none';
    $('use-scale').checked = false;
    $('use-rope').checked = false;
    renderInputs();
  }

  function init() {
    /* ?api=http://host:port lets a page served elsewhere pick its attnd;
     * URLSearchParams keeps a stray "%" as typed, where decodeURIComponent
     * would throw and leave the page "Loading…". */
    var given = new URLSearchParams(location.search).get('api');
    if (given) $('api-base').value = given;
    fixLinks();
    bindStructureButtons();
    bindOptions();
    reset();
    document.body.dataset.updates = '0';
    update();
  }

  window.attnd = { api: api, fmt: fmt, fmtDiff: fmtDiff, showError: showError, fillError: fillError,
                   localError: localError, server: server, showStartError: showStartError,
                   clearOptions: clearOptions, cellColour: cellColour, newTable: newTable,
                   onServerChange: onServerChange, onInputsChange: onInputsChange,
                   inputs: function () { return state; }, renderGrid: renderGrid,
                   renderHeat: renderHeat, badOption: badOption, commonOptions: commonOptions,
                   setBusy: setBusy, disable: disable };

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();

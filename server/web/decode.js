/*
 * server/web/decode.js — the decode section of the teaching page: one
 * session of attnd's KV cache, token by token. Start creates it with the
 * options above (POST /v1/sessions); each step appends the next token's
 * q, k and v and attends (POST /v1/sessions/{id}/attention), then draws
 * the cache attnd keeps (GET /v1/sessions/{id}/kv); End deletes it. The
 * next token's rows default to the inputs' first query and the key and
 * value rows in turn. Calls go through app.js (window.attnd). A session
 * lives on the attnd that started it: when the API base URL or key
 * changes, the open session is ended there (or forgotten, if that attnd
 * cannot delete it) and the learner is told.
 */
(function () {
  'use strict';
  var A = null;                       /* window.attnd, set in init */
  function $(id) { return document.getElementById(id); }
  var session = null;                 /* {id, d_k, d_v, length, kept, to} of the open session */
  var moves = 0;                      /* changes of the API base URL or key so far */
  var step = { q: [0], k: [0], v: [0] };

  function renderStepInputs() {
    var inp = A.inputs();
    var dk = session ? session.d_k : inp.q[0].length;
    var dv = session ? session.d_v : inp.v[0].length;
    var t = session ? session.length : 0;
    var L = inp.k.length;
    function fit(row, d) { var r = row.slice(0, d); while (r.length < d) r.push(0); return r; }
    step.q = fit(inp.q[0], dk);
    step.k = fit(inp.k[t % L], dk);
    step.v = fit(inp.v[t % L], dv);
    A.renderGrid($('grid-step-q'), step.q, 'Next token query', '', function () {});
    A.renderGrid($('grid-step-k'), step.k, 'Next token key', '', function () {});
    A.renderGrid($('grid-step-v'), step.v, 'Next token value', '', function () {});
  }

  function sessionInfo(text) { $('sess-info').textContent = text; }
  /* What attnd says session s keeps (its answer to POST /v1/sessions): the
   * options above reach the next session, not this one. */
  function keptOptions(s) {
    var b = Object.keys(s.bias || {}).map(function (x) { return 'b_' + x.toUpperCase(); });
    return 'It keeps the options it started with: softmax ' + s.softmax +
      (s.softmax === 'sink' ? ' (sink logit ' + s.sink_logit + ')' : '') + ', scale ' + A.fmt(s.scale) +
      ', ' + (b.length ? 'bias ' + b.join(', ') : 'no bias') + ', ' + (s.rope ? 'RoPE base ' +
      s.rope.base + ' (' + s.rope.pairs + ')' : 'no RoPE') + '; changes above apply to the next session.';
  }
  /* The decode buttons' mistakes and attnd's answers to them, said in the
   * decode section (not in the Results, whose box the next edit empties). */
  function sessError(e) { A.fillError($('sess-error'), e); startRefused = false; }

  /* A refused start spoke of the inputs and options as they were; the
   * learner's next edit of them makes it stale, so it goes then. */
  var startRefused = false;
  function startStale() { if (startRefused) sessError(null); }
  function refuseStart(show) { show(); startRefused = true; }

  /* Zero-based labels: ("pos ", 2) -> "pos 0", "pos 1"; ("k[", 2) -> "k[0]", "k[1]". */
  function indexLabels(prefix, n) {
    var close = prefix.slice(-1) === '[' ? ']' : '';
    var a = [];
    for (var i = 0; i < n; i++) a.push(prefix + i + close);
    return a;
  }

  function renderKv(kv) {
    var k = kv.k, v = kv.v;
    /* one head: [L][d]; several: [h][L][d] (show head 1) */
    if (k.length && Array.isArray(k[0]) && Array.isArray(k[0][0])) { k = k[0]; v = v[0]; }
    var rows = k.map(function (kr, i) { return kr.concat(v[i]); });
    var cols = indexLabels('k[', k.length ? k[0].length : 0)
      .concat(indexLabels('v[', v.length ? v[0].length : 0));
    A.renderHeat($('kv-table'), rows, indexLabels('pos ', rows.length), cols, 'cache',
      'Cached keys and values by position');
    $('kv-table').dataset.length = String(rows.length);
  }

  function startSession() {
    var opt = A.badOption();
    if (opt) {
      refuseStart(function () { sessError(A.localError(opt + ' is not a number; fix the field marked in red.')); });
      return;
    }
    var body = A.commonOptions({ d_k: A.inputs().q[0].length, d_v: A.inputs().v[0].length });
    var to = A.server(), movesThen = moves;
    $('sess-start').disabled = true;    /* one session: a second click would start another */
    A.setBusy(true);
    A.api('POST', '/v1/sessions', body).then(function (s) {
      if (moves !== movesThen) { $('sess-start').disabled = false; leave({ id: s.id, to: to }); return; }
      session = { id: s.id, d_k: body.d_k, d_v: body.d_v, length: s.length || 0, kept: keptOptions(s), to: to };
      $('sess-start').disabled = true;
      $('sess-end').disabled = false;
      $('step-box').disabled = false;
      $('kv-table').textContent = '';
      $('map-step-weights').textContent = '';
      sessionInfo('Session ' + s.id + ' started: empty cache, d_k = ' + body.d_k +
        ', d_v = ' + body.d_v + '. ' + session.kept);
      renderStepInputs();
      sessError(null);
      A.clearOptions();               /* attnd took the options */
    }, function (e) {
      $('sess-start').disabled = false;
      refuseStart(function () { A.showStartError($('sess-error'), e); });
    }).then(function () { A.setBusy(false); });
  }

  /* One step of the open session; an answer that comes back after the
   * session was ended (or another started) is dropped, neither drawn nor
   * said as an error: the learner has left that session. */
  function appendStep() {
    if (!session) return;
    var bad = [step.q, step.k, step.v].some(function (r) { return r.some(isNaN); });
    if (bad) { sessError(A.localError('a cell of the next token is not a number.')); return; }
    var mine = session, id = encodeURIComponent(session.id);
    var gone = function () { return session !== mine; };
    A.setBusy(true);
    A.api('POST', '/v1/sessions/' + id + '/attention', { q: [step.q], k: [step.k], v: [step.v] }, mine.to)
      .then(function (res) {
        if (gone()) return null;
        var L = res.weights[0].length;
        A.renderHeat($('map-step-weights'), res.weights, ['new q'], indexLabels('pos ', L),
          'weights', 'Weights of the newest query over cached positions');
        return A.api('GET', '/v1/sessions/' + id + '/kv', undefined, mine.to).then(function (kv) {
          if (gone()) return;
          renderKv(kv);
          session.length = Number($('kv-table').dataset.length);
          sessionInfo('Session ' + session.id + ': ' + session.length + ' token' +
            (session.length === 1 ? '' : 's') + ' cached. The new query attends to all of them. ' + session.kept);
          $('sess-status').textContent = 'Decode step done: cache length ' + session.length +
            '; weights of the new query: ' + res.weights[0].map(A.fmt).join(', ') + '.';
          renderStepInputs();
          sessError(null);
          document.body.dataset.steps = String(session.length);
        });
      }).then(null, function (e) { if (!gone()) sessError(e); })
      .then(function () { A.setBusy(false); });
  }

  /* The open session closed on the page (the buttons as before a start). */
  function closeSession(said) {
    session = null;
    sessError(null);
    $('sess-start').disabled = false;
    $('sess-end').disabled = true;
    $('step-box').disabled = true;
    $('sess-status').textContent = said;
    renderStepInputs();
  }

  function endSession() {
    if (!session) return;
    var old = session;
    closeSession('Session ended.');
    A.api('DELETE', '/v1/sessions/' + encodeURIComponent(old.id), undefined, old.to).then(function () {
      sessionInfo('Session ' + old.id + ' deleted.');
    }, sessError);
  }

  /* The API base URL or key changed: the session s (open, or started just
   * before the change) is deleted on the attnd and with the key it was
   * started with, or forgotten when that attnd cannot delete it; later
   * steps would go to the new server, which does not hold it. */
  function leave(s) {
    var what = 'Session ' + s.id + ' ended: the API base URL or key changed, and a session stays on the attnd that started it.';
    if (session === s) closeSession(what); else $('sess-status').textContent = what;
    A.api('DELETE', '/v1/sessions/' + encodeURIComponent(s.id), undefined, s.to).then(function () {
      sessionInfo('Session ' + s.id + ' deleted on the attnd it was started on; start a session to decode on this one.');
    }, function (e) {
      sessionInfo('Session ' + s.id + ' forgotten: the attnd it was started on did not delete it (' +
        (e.message || e.code) + '); it expires there unused. Start a session to decode on this one.');
    });
  }

  function serverMoved() {
    moves++;
    if (session) leave(session);
  }

  function init() {
    A = window.attnd;
    $('sess-start').addEventListener('click', startSession);
    $('controls').addEventListener('input', startStale);
    $('controls').addEventListener('change', startStale);
    $('sess-end').addEventListener('click', endSession);
    $('step').addEventListener('click', appendStep);
    A.onInputsChange(renderStepInputs);
    A.onServerChange(serverMoved);
    renderStepInputs();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();

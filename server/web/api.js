/*
 * server/web/api.js — how the teaching page calls attnd: the API base URL
 * and key fields read as the server to ask (a base refused before anything
 * is sent), one request as a promise of the parsed JSON answer or an
 * ApiError, and an error written into its box as text ("Not sent", "No
 * answer from attnd", "attnd answered 422 invalid_field: …"). Every call
 * of app.js, decode.js, teach.js and model.js goes through here (the last
 * three through window.attnd). Plain JavaScript, loaded before app.js;
 * hands its functions over in window.attndPage.
 */
(function () {
  'use strict';
  var P = window.attndPage = window.attndPage || {};

  function $(id) { return document.getElementById(id); }

  /* The API base URL field as {base} ('' = the attnd that served the
   * page; a trailing /v1 dropped, as every path the page asks for starts
   * with it) or {problem}: text without http:// or https:// would be
   * taken as a path on the page's own server, and a query or fragment
   * would swallow the path appended to it. */
  function baseOf(text) {
    var t = String(text).trim(), u = null;
    if (!t) return { base: '' };
    try { u = new URL(t); } catch (e) { u = null; }
    if (!u || !/^https?:\/\//i.test(t) || u.search || u.hash || u.username || u.password) {
      return { problem: 'the API base URL "' + t + '" is not an absolute http:// or https:// URL ' +
        'such as http://127.0.0.1:8080 (no /v1, query or #); fix the field marked in red, ' +
        'or empty it to call the attnd that served this page.' };
    }
    return { base: u.origin + u.pathname.replace(/\/+$/, '').replace(/\/v1$/i, '') };
  }

  /* the base every request goes to ('' also while the field is refused) */
  function apiBase() { return baseOf($('api-base').value).base || ''; }

  /* Marks the API base URL field when it is refused; its problem or null. */
  function baseProblem() {
    var p = baseOf($('api-base').value).problem || null;
    if (p) $('api-base').setAttribute('aria-invalid', 'true');
    else $('api-base').removeAttribute('aria-invalid');
    return p;
  }

  function ApiError(status, code, message, path) {
    this.status = status;
    this.code = code;
    this.message = message;
    this.path = path;
  }

  /* A mistake found before any request is sent. */
  function localError(message) {
    var e = new ApiError(0, 'not_sent', message, null);
    e.local = true;
    return e;
  }

  /* A body that is no JSON error, as one short line: an HTML page (a
   * proxy's 502 in front of attnd) by its title, or its text without the
   * markup; at most 200 characters. */
  function plainText(text) {
    var t = String(text || '');
    if (/^\s*</.test(t)) {
      var m = /<title[^>]*>([^<]*)</i.exec(t);
      t = m ? m[1] : t.replace(/<!--[\s\S]*?-->|<[^>]*>/g, ' ');
    }
    t = t.replace(/\s+/g, ' ').trim();
    return t.length > 200 ? t.slice(0, 200) + '\u2026' : t;
  }

  /* The attnd the fields point at now and the key they give it. */
  function server() { return { base: apiBase(), key: $('api-key').value.trim() }; }

  /* One request; resolves to the parsed JSON body (null for 204), rejects
   * with ApiError (also for a 2xx whose body is no JSON object). to: the server() to ask (a decode session's own),
   * else the one the fields point at. */
  function api(method, path, body, to) {
    var init = { method: method, headers: {} };
    if (!to) {
      var problem = baseProblem();
      if (problem) return Promise.reject(localError(problem));
      to = server();
    }
    if (to.key) init.headers.Authorization = 'Bearer ' + to.key;
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    return fetch(to.base + path, init).then(function (r) {
      return r.text().then(function (text) {
        var data = null;
        if (text) {
          try { data = JSON.parse(text); } catch (e) { data = null; }
        }
        /* a 2xx that is no JSON object (a server's HTML page, an empty
         * 200) is not attnd's answer: drawn, it would leave the page busy */
        if (r.ok && (r.status === 204 || (data && typeof data === 'object'))) return data;
        if (r.ok) {
          throw new ApiError(r.status, 'not_json', 'the answer is no JSON object' +
            (plainText(text) ? ' (' + plainText(text) + ')' : '') +
            '; is the API base URL the address of attnd?', null);
        }
        var err = data && data.error;
        if (err && typeof err === 'object') {
          throw new ApiError(r.status, err.code, err.message, err.path);
        }
        throw new ApiError(r.status, 'http_' + r.status,
          typeof err === 'string' ? err : plainText(text) || r.statusText, null);
      });
    }, function () {
      throw new ApiError(0, 'network',
        'Could not reach attnd at ' + (to.base || location.origin) +
        ' (server down, wrong URL, or the origin is not in --cors-origins).',
        null);
    });
  }

  /* Fills box with e: "Not sent: …" for a mistake found before sending,
   * "No answer from attnd: …" when the request never got an answer,
   * "attnd answered 422 invalid_field: … (at /k/2/1)" otherwise; e null
   * empties and hides the box; field, when given, names the field the
   * path points at ("(at /scale: the custom scale, marked in red)"). */
  function fillError(box, e, field) {
    if (!e) { box.hidden = true; box.textContent = ''; return; }
    box.hidden = false;
    box.textContent = '';
    var h = document.createElement('strong');
    /* status 0 with a local code: nothing was sent (a typing error) */
    h.textContent = e instanceof ApiError && e.local ? 'Not sent'
      : e instanceof ApiError && e.code === 'network' ? 'No answer from attnd'
        : e instanceof ApiError
          ? 'attnd answered ' + (e.status ? e.status + ' ' : '') + (e.code || 'error')
          : 'Error';
    box.appendChild(h);
    var p = document.createElement('span');
    p.textContent = ': ' + (e.message || String(e));
    box.appendChild(p);
    if (e.path) {
      var w = document.createElement('span');
      w.textContent = ' (at ' + e.path + (field ? ': ' + field + ', marked in red' : '') + ')';
      box.appendChild(w);
    }
  }

  P.apiBase = apiBase; P.baseProblem = baseProblem; P.localError = localError;
  P.server = server; P.api = api; P.fillError = fillError;
})();

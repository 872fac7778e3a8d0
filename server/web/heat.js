/*
 * server/web/heat.js — how the teaching page shows attnd's numbers: their
 * text (six decimals, exponents for the very large and small), the colour
 * ramps of the heat maps with a text colour that keeps WCAG contrast, a
 * matrix as a labelled heat map table whose cells keep attnd's exact
 * number, and a plain table with a caption. app.js, teach.js and model.js
 * draw with these (the last two through window.attnd). Plain JavaScript,
 * loaded before app.js; hands its functions over in window.attndPage.
 */
(function () {
  'use strict';
  var P = window.attndPage = window.attndPage || {};

  /* ---- numbers ------------------------------------------------------- */
  function fmt(x) {
    if (x === null || x === undefined) return 'masked';
    if (typeof x !== 'number' || !isFinite(x)) return String(x);
    var a = Math.abs(x);
    if (a !== 0 && (a >= 1e6 || a < 1e-6)) return x.toExponential(3);
    var t = x.toFixed(6);
    return t === '-0.000000' ? '0.000000' : t;
  }

  function fmtDiff(x) {
    if (typeof x !== 'number') return String(x);
    return x === 0 ? '0' : x.toExponential(2);
  }

  /* ---- heat maps ----------------------------------------------------- */
  function mix(a, b, t) {
    return [0, 1, 2].map(function (i) { return Math.round(a[i] + (b[i] - a[i]) * t); });
  }

  function luminance(rgb) {
    var c = rgb.map(function (v) {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
  }

  var WHITE = [255, 255, 255], BLUE = [29, 78, 216], ORANGE = [194, 65, 12];

  /* kind 'weights': 0..1 white->blue; otherwise diverging around 0. */
  function cellColour(x, kind, maxAbs) {
    var rgb;
    if (kind === 'weights') rgb = mix(WHITE, BLUE, Math.max(0, Math.min(1, x)));
    else {
      var t = maxAbs > 0 ? Math.min(1, Math.abs(x) / maxAbs) : 0;
      rgb = mix(WHITE, x < 0 ? ORANGE : BLUE, t);
    }
    return { bg: 'rgb(' + rgb.join(',') + ')', fg: textOn(rgb) };
  }

  /* The text colour for background rgb: black or white, whichever has the
   * higher WCAG contrast ((L1 + 0.05) / (L2 + 0.05)). Black, not a dark
   * grey: where the two are equal (L = 0.179) black/white give 4.58:1, so
   * every background keeps 4.5:1; #111 would give 4.35. */
  function textOn(rgb) {
    var l = luminance(rgb);
    return (l + 0.05) / 0.05 >= 1.05 / (l + 0.05) ? '#000' : '#fff';
  }

  /* m [rows][cols] (numbers or null) -> a labelled table with the numbers
   * in the cells; data-value keeps attnd's number exactly. */
  function renderHeat(holder, m, rowLabels, colLabels, kind, caption) {
    var maxAbs = 0;
    m.forEach(function (row) {
      row.forEach(function (x) { if (typeof x === 'number') maxAbs = Math.max(maxAbs, Math.abs(x)); });
    });
    var table = document.createElement('table');
    table.className = 'heatmap';
    table.dataset.kind = kind;
    if (caption) {
      var cap = document.createElement('caption');
      cap.className = 'visually-hidden';
      cap.textContent = caption;
      table.appendChild(cap);
    }
    var thead = document.createElement('thead');
    var hr = document.createElement('tr');
    var corner = document.createElement('td');
    hr.appendChild(corner);
    colLabels.forEach(function (l) {
      var th = document.createElement('th');
      th.scope = 'col';
      th.textContent = l;
      hr.appendChild(th);
    });
    thead.appendChild(hr);
    table.appendChild(thead);
    var tbody = document.createElement('tbody');
    m.forEach(function (row, i) {
      var tr = document.createElement('tr');
      var th = document.createElement('th');
      th.scope = 'row';
      th.textContent = rowLabels[i];
      tr.appendChild(th);
      row.forEach(function (x, j) {
        var td = document.createElement('td');
        td.dataset.row = String(i);
        td.dataset.col = String(j);
        if (typeof x === 'number') {
          var c = cellColour(x, kind, maxAbs);
          td.style.background = c.bg;
          td.style.color = c.fg;
          td.dataset.value = String(x);
          td.textContent = fmt(x);
          td.title = rowLabels[i] + ', ' + colLabels[j] + ': ' + String(x);
        } else {
          td.className = 'masked';
          td.dataset.value = 'null';
          td.textContent = 'masked';
          td.title = rowLabels[i] + ', ' + colLabels[j] + ': masked (score \u2212\u221E)';
        }
        tr.appendChild(td);
      });
      tbody.appendChild(tr);
    });
    table.appendChild(tbody);
    holder.textContent = '';
    holder.appendChild(table);
  }

  /* A table of class cls with a caption and a header row of column names;
   * returns its (empty, attached) tbody. */
  function newTable(cls, caption, cols) {
    var table = document.createElement('table');
    table.className = cls;
    var cap = document.createElement('caption');
    cap.textContent = caption;
    table.appendChild(cap);
    var hr = document.createElement('tr');
    cols.forEach(function (t) {
      var th = document.createElement('th');
      th.scope = 'col';
      th.textContent = t;
      hr.appendChild(th);
    });
    var thead = document.createElement('thead');
    thead.appendChild(hr);
    table.appendChild(thead);
    var tbody = document.createElement('tbody');
    table.appendChild(tbody);
    return tbody;
  }

  P.fmt = fmt; P.fmtDiff = fmtDiff; P.cellColour = cellColour;
  P.renderHeat = renderHeat; P.newTable = newTable;
})();

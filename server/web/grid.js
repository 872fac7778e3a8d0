/*
 * server/web/grid.js — the teaching page's editable grids: a matrix or a
 * vector as a table of labelled text inputs, each edit written back into
 * the array it shows, and a cell's text read as a number (NaN for none).
 * app.js draws the inputs Q, K, V and the biases with it, decode.js the
 * next token's rows (through window.attnd). Plain JavaScript, loaded
 * before app.js; hands its functions over in window.attndPage.
 */
(function () {
  'use strict';
  var P = window.attndPage = window.attndPage || {};

  /* A cell's text as a number, NaN for none; one past the largest double
   * (1e400) too, as JSON.stringify would send its Infinity as null. */
  function parseCell(text) {
    var t = String(text).trim().replace(/\u2212/g, '-');
    if (t === '' || !/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(t)) return NaN;
    var x = Number(t);
    return isFinite(x) ? x : NaN;
  }

  /* A matrix (array of rows) or vector as a table of text inputs. name is
   * the label used for screen readers ("K"), rowName the row label ("k"). */
  function renderGrid(holder, data, name, rowName, onEdit) {
    var isVec = !Array.isArray(data[0]);
    var rows = isVec ? [data] : data;
    var table = document.createElement('table');
    table.className = 'grid';
    var body = document.createElement('tbody');
    rows.forEach(function (row, r) {
      var tr = document.createElement('tr');
      if (!isVec) {   /* a vector is named by the label beside it */
        var th = document.createElement('th');
        th.scope = 'row';
        th.textContent = rowName + (r + 1);
        tr.appendChild(th);
      }
      row.forEach(function (x, c) {
        var td = document.createElement('td');
        var inp = document.createElement('input');
        inp.type = 'text';
        inp.inputMode = 'decimal';
        inp.autocomplete = 'off';
        inp.spellcheck = false;
        inp.size = 5;
        inp.value = isNaN(x) ? '' : String(x);
        /* drawn again (a row added) a cell with no number keeps its mark */
        if (isNaN(x)) inp.setAttribute('aria-invalid', 'true');
        inp.dataset.c = String(c);
        if (!isVec) inp.dataset.r = String(r);
        inp.setAttribute('aria-label', isVec
          ? name + ' component ' + (c + 1)
          : name + ' row ' + (r + 1) + ' column ' + (c + 1));
        inp.addEventListener('input', function () {
          var val = parseCell(inp.value);
          if (isNaN(val)) inp.setAttribute('aria-invalid', 'true');
          else inp.removeAttribute('aria-invalid');
          if (isVec) data[c] = val; else data[r][c] = val;
          onEdit(name + ' edited');
        });
        td.appendChild(inp);
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    table.appendChild(body);
    holder.textContent = '';
    holder.appendChild(table);
  }

  P.parseCell = parseCell;
  P.renderGrid = renderGrid;
})();

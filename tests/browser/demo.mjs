// tests/browser/demo.mjs — the teaching page in real headless Chromium.
//
//   node demo.mjs --page URL --api URL --shots DIR [--name demo]
//
// --page is where the page is loaded from (attnd itself, or a second origin
// for the CORS case: then URL carries ?api=<attnd>); --api is attnd's URL,
// which this script also calls directly to get the numbers the page must
// show. Chromium is Debian's /usr/bin/chromium driven by playwright-core.
// Steps: heat map cells equal the API's numbers; the K bias moves the
// scores and not the weights (standard); softmax1 changes the weights and
// the K bias then changes them too; the sink's extra option is said to
// score the sink logit; the lede's formula adds the biases to q, k and v;
// /v1/verify's claims are shown; API
// errors are readable; a decode session grows the cached K/V table and
// says the options it started with, which later changes do not reach; the
// page is keyboard operable, labelled, readable at 375 px. Screenshots go
// to DIR/<name>.png and DIR/<name>-375.png. Ends with "N passed, N failed".
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { arg, assert, close, finish, step } from './steps.mjs';

const PAGE = arg('page');
const API = arg('api');
const SHOTS = arg('shots', 'build/artifacts');
const NAME = arg('name', 'demo');
const REFUSED = process.argv.includes('--refused');   // the origin is not allowed
const KEY = arg('api-key');                            // attnd runs with --api-key KEY
if (!PAGE || !API) {
  console.error('usage: node demo.mjs --page URL --api URL [--shots DIR] [--name NAME]');
  process.exit(2);
}


const Q = [[1, 0]];
const K = [[1, 0], [0, 1], [-1, 0]];
const V = [[1, 0, 0], [0, 1, 0], [0, 0, 1]];

async function apiPost(path, body) {
  const headers = { 'Content-Type': 'application/json' };
  if (KEY) headers.Authorization = `Bearer ${KEY}`;
  const r = await fetch(API + path, { method: 'POST', headers, body: JSON.stringify(body) });
  const j = await r.json();
  assert(r.ok, `${path} answered ${r.status}: ${JSON.stringify(j)}`);
  return j;
}

// The heat map `id` as numbers (null for masked cells), row-major.
async function heat(page, id) {
  return page.$$eval(`#${id} table tbody tr`, (rows) => rows.map((tr) =>
    Array.from(tr.querySelectorAll('td')).map((td) => (td.dataset.value === 'null' ? null : Number(td.dataset.value)))));
}
async function heatText(page, id) {
  return page.$$eval(`#${id} table tbody td`, (tds) => tds.map((td) => td.textContent));
}

async function updates(page) {
  return page.evaluate(() => Number(document.body.dataset.updates || 0));
}
// Run `action`, then wait until the page has finished the update it causes.
async function andWait(page, action) {
  const before = await updates(page);
  await action();
  await page.waitForFunction((n) => Number(document.body.dataset.updates || 0) > n &&
    document.body.dataset.busy === '0', before, { timeout: 10000 });
}

function sameMatrix(a, b, what, tol = 0) {
  assert(a.length === b.length, `${what}: ${a.length} rows vs ${b.length}`);
  a.forEach((r, i) => {
    assert(r.length === b[i].length, `${what} row ${i}: ${r.length} vs ${b[i].length}`);
    r.forEach((x, j) => {
      if (tol === 0) assert(x === b[i][j], `${what}[${i}][${j}]: page ${x}, API ${b[i][j]}`);
      else close(x, b[i][j], tol, `${what}[${i}][${j}]`);
    });
  });
}
function maxDiff(a, b) {
  let d = 0;
  a.forEach((r, i) => r.forEach((x, j) => { d = Math.max(d, Math.abs(x - b[i][j])); }));
  return d;
}

// Relative luminance and contrast ratio (WCAG 2).
function lum(rgb) {
  const c = rgb.map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
  return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
}
function contrast(a, b) {
  const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
  return (x + 0.05) / (y + 0.05);
}
const rgbOf = (s) => (s.match(/\d+(\.\d+)?/g) || []).slice(0, 3).map(Number);

mkdirSync(SHOTS, { recursive: true });
const profile = mkdtempSync(join(tmpdir(), 'attnd-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1280, height: 900 },
});
const consoleErrors = [];
try {
  const page = await context.newPage();
  page.on('pageerror', (e) => consoleErrors.push(String(e)));

  if (KEY) {
    await step('without the API key the page shows 401 unauthorized; with it, the maps', async () => {
      await page.goto(PAGE);
      await page.waitForFunction(() => Number(document.body.dataset.updates || 0) > 0 &&
        document.body.dataset.busy === '0', null, { timeout: 15000 });
      const err = await page.$eval('#error', (e) => (e.hidden ? '' : e.textContent));
      assert(/401/.test(err) && /unauthorized/.test(err), `error box: ${err}`);
      await andWait(page, () => page.fill('#api-key', KEY).then(() => page.press('#api-key', 'Tab')));
      assert(await page.$eval('#error', (e) => e.hidden), 'error still shown with the key');
      const api = await apiPost('/v1/attention', { q: Q, k: K, v: V });
      sameMatrix(await heat(page, 'map-weights'), api.weights, 'weights');
      assert((await page.$$eval('#all-checks .check', (c) => c.length)) > 0, 'no checks with the key');
    });
    await step('with the key, the other panels ask again: plane, stepper, quiet heads, pasted model', async () => {
      await page.waitForFunction(() => document.querySelectorAll('#geo-bars .bar-num').length === 3 &&
        document.querySelectorAll('#steps-rows .stage').length === 8 &&
        /^\d/.test(document.getElementById('quiet-mass1').textContent) &&
        document.querySelectorAll('#heat-grid canvas').length > 0, null, { timeout: 10000 })
        .catch(() => {});
      const got = await page.evaluate(() => ({
        bars: document.querySelectorAll('#geo-bars .bar-num').length,
        stages: document.querySelectorAll('#steps-rows .stage').length,
        quiet: document.getElementById('quiet-mass1').textContent,
        maps: document.querySelectorAll('#heat-grid canvas').length,
        model: document.getElementById('model-status').textContent }));
      assert(got.bars === 3 && got.stages === 8 && /^\d/.test(got.quiet) && got.maps > 0, JSON.stringify(got));
      const w = (await apiPost('/v1/attention', { q: Q, k: K, v: V, scale: 1 / Math.SQRT2 })).weights[0];
      const bars = await page.$$eval('#geo-bars .bar-num', (e) => e.map((x) => Number(x.dataset.weight)));
      bars.forEach((x, j) => close(x, w[j], 1e-15, `plane weight ${j}`));
    });
  }

  if (REFUSED || KEY) {
    if (REFUSED) await step('a page from an origin not in --cors-origins is refused, and says so', async () => {
      await page.goto(PAGE);
      await page.waitForFunction(() => Number(document.body.dataset.updates || 0) > 0 &&
        document.body.dataset.busy === '0', null, { timeout: 15000 });
      const err = await page.$eval('#error', (e) => (e.hidden ? '' : e.textContent));
      assert(/Could not reach attnd/.test(err) && /cors-origins/.test(err), `error box: ${err}`);
      const cells = await page.$$eval('#map-weights td', (t) => t.length);
      assert(cells === 0, 'weights shown although the browser must block the answer');
    });
    await context.close();
    rmSync(profile, { recursive: true, force: true });
    finish();
  }

  await step('page loads and shows the worked example', async () => {
    await page.goto(PAGE);
    await page.waitForFunction(() => Number(document.body.dataset.updates || 0) > 0 &&
      document.body.dataset.busy === '0', null, { timeout: 15000 });
    const err = await page.$eval('#error', (e) => (e.hidden ? '' : e.textContent));
    assert(err === '', `error box shows: ${err}`);
    assert((await page.inputValue('#grid-k input[data-r="2"][data-c="0"]')) === '-1', 'k3 is not (-1, 0)');
  });

  let base;
  await step('heat map cells hold the API\'s own numbers', async () => {
    base = await apiPost('/v1/attention', { q: Q, k: K, v: V });
    sameMatrix(await heat(page, 'map-scores'), base.scores, 'scores');
    sameMatrix(await heat(page, 'map-weights'), base.weights, 'weights');
    sameMatrix(await heat(page, 'map-output'), base.output, 'output');
    const text = await heatText(page, 'map-weights');
    assert(JSON.stringify(text) === JSON.stringify(['0.575975', '0.283995', '0.140029']), `weights text ${text}`);
    const stext = await heatText(page, 'map-scores');
    assert(JSON.stringify(stext) === JSON.stringify(['0.707107', '0.000000', '-0.707107']), `scores text ${stext}`);
    const heads = await page.$$eval('#map-weights th', (t) => t.map((x) => x.textContent));
    assert(heads.join(',') === 'k1,k2,k3,q1', `labels ${heads}`);
  });

  await step('every control has a label and the results have a live region', async () => {
    const unlabelled = await page.$$eval('input, select, button', (els) => els.filter((e) => {
      if (e.type === 'hidden') return false;
      const name = (e.labels && e.labels.length) || e.getAttribute('aria-label') ||
        (e.tagName === 'BUTTON' && e.textContent.trim());
      return !name;
    }).map((e) => e.id || e.outerHTML.slice(0, 80)));
    assert(unlabelled.length === 0, `unlabelled: ${unlabelled.join(', ')}`);
    const live = await page.$eval('#status', (e) => `${e.getAttribute('role')}/${e.getAttribute('aria-live')}`);
    assert(live === 'status/polite', `live region ${live}`);
    assert((await page.textContent('#status')).includes('0.575975'), 'status does not announce the weights');
  });

  await step('heat map text has at least 4.5:1 contrast', async () => {
    const cells = await page.$$eval('.heatmap td[data-value]', (tds) => tds.map((td) => {
      const s = getComputedStyle(td);
      return [s.color, s.backgroundColor];
    }));
    assert(cells.length >= 9, `only ${cells.length} cells`);
    for (const [fg, bg] of cells) {
      const c = contrast(rgbOf(fg), rgbOf(bg));
      assert(c >= 4.5, `contrast ${c.toFixed(2)} for ${fg} on ${bg}`);
    }
  });

  await step('K bias on (keyboard): scores shift by 3/sqrt(2), weights unchanged', async () => {
    // Reach the checkbox with Tab and toggle it with Space, as a keyboard user.
    await page.focus('body');
    let found = false;
    for (let i = 0; i < 120 && !found; i++) {
      await page.keyboard.press('Tab');
      found = await page.evaluate(() => document.activeElement && document.activeElement.id === 'use-bk');
    }
    assert(found, 'Tab never reached the K bias checkbox');
    await andWait(page, () => page.keyboard.press('Space'));
    assert(await page.isChecked('#use-bk'), 'Space did not check the K bias');
    const api = await apiPost('/v1/attention', { q: Q, k: K, v: V, bias: { k: [3, -2] } });
    const s = await heat(page, 'map-scores');
    const w = await heat(page, 'map-weights');
    sameMatrix(s, api.scores, 'scores');
    sameMatrix(w, api.weights, 'weights');
    s[0].forEach((x, j) => close(x - base.scores[0][j], 3 / Math.SQRT2, 1e-12, `shift of score ${j}`));
    assert(maxDiff(w, base.weights) <= 1e-15, `weights moved by ${maxDiff(w, base.weights)}`);
    const note = await page.textContent('#weights-change');
    assert(/unchanged/i.test(note), `change note: ${note}`);
    const shift = await page.textContent('#changes');
    assert(shift.includes('2.121320') && /common shift/.test(shift), `shift note: ${shift}`);
  });

  // The checks shown in the claim panel: {name: passed}.
  async function shownChecks() {
    return page.$$eval('#claim-checks .check', (cs) => Object.fromEntries(cs.map((c) =>
      [c.dataset.name, c.classList.contains('pass') && /max_abs_diff/.test(c.textContent)])));
  }
  async function caseRow(condition) {
    return page.$eval(`#cases tr[data-condition="${condition}"]`, (tr) => ({
      current: tr.getAttribute('aria-current') === 'true',
      cells: Array.from(tr.querySelectorAll('td')).map((td) => td.textContent) }));
  }

  await step('the lede\'s formula adds the biases to q, k and v, not to the scores', async () => {
    const lede = (await page.textContent('header .lede')).replace(/\s+/g, ' ');
    assert(lede.includes('s = scale·(q + bQ)·(k + bK)') && lede.includes('Σ p·(v + bV)') &&
      !/q·k \+ bias/.test(lede), `lede: ${lede}`);
  });

  await step('the claim panel shows /v1/verify\'s K-bias checks and the four-case table', async () => {
    const lead = await page.textContent('#claim-lead');
    assert(/common/i.test(lead) && /weights/i.test(lead), `lead: ${lead}`);
    const shown = await shownChecks();
    assert(shown.k_bias_row_constant === true && shown.k_bias_weights_unchanged === true,
      `shown checks: ${JSON.stringify(shown)} / ${await page.textContent('#claim-checks')}`);
    const all = await page.$$eval('#all-checks .check', (cs) => cs.length);
    assert(all >= 10, `only ${all} checks in the full list`);
    const k = await caseRow('k_bias');
    const none = await caseRow('no_bias');
    const q = await caseRow('q_bias');
    assert(k.current && !none.current, 'the K-bias case is not marked current');
    assert(k.cells[1] === '(0.575975, 0.283995, 0.140029)' && none.cells[1] === k.cells[1],
      `weights of the cases: ${k.cells[1]} / ${none.cells[1]}`);
    assert(k.cells[0] === '(2.828427, 2.121320, 1.414214)', `K-bias scores ${k.cells[0]}`);
    assert(q.cells[1] === '(0.445808, 0.445808, 0.108383)', `Q-bias weights ${q.cells[1]}`);
  });

  let stdK;
  await step('softmax1: weights change, and equal the API\'s softmax1 weights', async () => {
    stdK = await heat(page, 'map-weights');
    await andWait(page, () => page.check('#sm-softmax1'));
    const api = await apiPost('/v1/attention', { q: Q, k: K, v: V, bias: { k: [3, -2] }, softmax: 'softmax1' });
    const w = await heat(page, 'map-weights');
    sameMatrix(w, api.weights, 'weights');
    assert(maxDiff(w, stdK) > 1e-3, `softmax1 weights equal standard ones (${maxDiff(w, stdK)})`);
    const sum = w[0].reduce((a, b) => a + b, 0);
    assert(sum < 1 && sum > 0, `softmax1 row sum ${sum}`);
    const shown = await shownChecks();
    assert(shown.softmax1_not_shift_invariant === true, `shown checks: ${JSON.stringify(shown)}`);
    const k = await caseRow('k_bias');
    const none = await caseRow('no_bias');
    assert(k.current && k.cells[1] !== none.cells[1], `softmax1 cases: ${k.cells[1]} / ${none.cells[1]}`);
  });

  await step('softmax1: the K bias now changes the weights (not shift invariant)', async () => {
    const withK = await heat(page, 'map-weights');
    await andWait(page, () => page.uncheck('#use-bk'));
    const api = await apiPost('/v1/attention', { q: Q, k: K, v: V, softmax: 'softmax1' });
    const w = await heat(page, 'map-weights');
    sameMatrix(w, api.weights, 'weights');
    assert(maxDiff(w, withK) > 1e-3, `weights did not change (${maxDiff(w, withK)})`);
    const note = await page.textContent('#weights-change');
    assert(/changed/i.test(note) && !/unchanged/i.test(note), `change note: ${note}`);
    const lead = await page.textContent('#claim-lead');
    assert(/softmax1/.test(lead), `lead: ${lead}`);
  });

  await step('editing a cell re-computes; API errors are shown with code and path', async () => {
    await andWait(page, () => page.check('#sm-standard'));
    await andWait(page, () => page.fill('#grid-q input[data-r="0"][data-c="1"]', '1'));
    const api = await apiPost('/v1/attention', { q: [[1, 1]], k: K, v: V });
    sameMatrix(await heat(page, 'map-weights'), api.weights, 'weights after edit');
    await andWait(page, async () => { await page.check('#use-scale'); await page.fill('#scale', '0'); });
    const err = await page.textContent('#error');
    assert(!(await page.$eval('#error', (e) => e.hidden)), 'error box hidden');
    assert(/422/.test(err) && /invalid_field/.test(err) && /\/scale/.test(err), `error text: ${err}`);
    await andWait(page, () => page.uncheck('#use-scale'));
    assert(await page.$eval('#error', (e) => e.hidden), 'error box still shown after the fix');
  });

  await step('add and remove a token row', async () => {
    await andWait(page, () => page.click('#kv-add'));
    assert((await heat(page, 'map-weights'))[0].length === 4, 'no fourth key');
    await andWait(page, () => page.click('#kv-del'));
    assert((await heat(page, 'map-weights'))[0].length === 3, 'fourth key not removed');
    await andWait(page, () => page.click('#reset'));
    sameMatrix(await heat(page, 'map-weights'), base.weights, 'weights after reset');
  });

  await step('RoPE after the K bias: the weights change, and the RoPE check says why', async () => {
    await andWait(page, () => page.check('#use-bk'));
    await andWait(page, () => page.check('#use-rope'));
    const rope = { base: 10000, pairs: 'interleaved' };
    const api = await apiPost('/v1/attention', { q: Q, k: K, v: V, bias: { k: [3, -2] }, rope });
    const withK = await heat(page, 'map-weights');
    sameMatrix(withK, api.weights, 'weights with K bias and RoPE');
    const shown = await shownChecks();
    assert(shown.rope_breaks_k_bias === true, `shown checks: ${JSON.stringify(shown)}`);
    assert(/RoPE/.test(await page.textContent('#claim-lead')), 'lead does not mention RoPE');
    await andWait(page, () => page.uncheck('#use-bk'));
    const noK = await heat(page, 'map-weights');
    sameMatrix(noK, (await apiPost('/v1/attention', { q: Q, k: K, v: V, rope })).weights, 'weights with RoPE');
    assert(maxDiff(withK, noK) > 1e-6, `the K bias did not change the weights under RoPE (${maxDiff(withK, noK)})`);
    await andWait(page, () => page.click('#reset'));
  });

  await step('sink softmax and a bottom-right causal mask (masked cells and rows say so)', async () => {
    await andWait(page, () => page.check('#sm-sink'));
    await andWait(page, () => page.fill('#sink-logit', '1'));
    let api = await apiPost('/v1/attention', { q: Q, k: K, v: V, softmax: 'sink', sink_logit: 1 });
    sameMatrix(await heat(page, 'map-weights'), api.weights, 'sink weights');
    const lead = await page.textContent('#claim-lead');       /* its extra option scores the sink logit, not 0 */
    assert(!/zero-score/.test(lead) && /score is the sink logit \(not scaled\)/.test(lead), `sink lead: ${lead}`);
    await andWait(page, () => page.click('#q-add'));
    await andWait(page, () => page.selectOption('#causal', 'bottom_right'));
    api = await apiPost('/v1/attention', { q: [[1, 0], [0, 0]], k: K, v: V, softmax: 'sink', sink_logit: 1,
      causal: 'bottom_right' });
    sameMatrix(await heat(page, 'map-scores'), api.scores, 'causal scores');
    sameMatrix(await heat(page, 'map-weights'), api.weights, 'causal weights');
    const masked = await page.$eval('#map-scores td[data-row="0"][data-col="2"]', (td) => td.textContent);
    assert(api.scores[0][2] === null && masked === 'masked', `masked cell shows ${masked}`);
    await andWait(page, () => page.click('#q-add'));
    await andWait(page, () => page.click('#q-add'));        /* n = 4 > L = 3: query 1 sits before every key */
    api = await apiPost('/v1/attention', { q: [[1, 0], [0, 0], [0, 0], [0, 0]], k: K, v: V, softmax: 'sink',
      sink_logit: 1, causal: 'bottom_right' });
    const meta = await page.textContent('#meta');
    const rowName = await page.textContent('#map-scores tbody tr:first-child th');
    await andWait(page, () => page.click('#reset'));
    sameMatrix(await heat(page, 'map-weights'), base.weights, 'weights after reset');
    assert(JSON.stringify(api.meta.empty_rows) === '[0]' && rowName === 'q1' &&
      /rows with no allowed key: q1\b/.test(meta), `row ${rowName}; meta: ${meta}`);
  });

  await step('decode: three tokens grow the cache; the last query\'s weights equal the stateless ones', async () => {
    await page.click('#sess-start');
    await page.waitForFunction(() => !document.getElementById('step-box').disabled ||
      !document.getElementById('sess-error').hidden, null, { timeout: 10000 });
    const err = await page.$eval('#sess-error', (e) => (e.hidden ? '' : e.textContent));
    assert(err === '', `starting a session: ${err}`);
    /* the session keeps the options it started with, and says so */
    await andWait(page, () => page.check('#sm-softmax1'));
    for (let t = 1; t <= 3; t++) {
      await page.click('#step');
      await page.waitForFunction((n) => Number(document.body.dataset.steps || 0) === n &&
        document.body.dataset.busy === '0', t, { timeout: 10000 });
      const rows = await page.$$eval('#kv-table tbody tr', (r) => r.length);
      assert(rows === t, `cache table has ${rows} rows after ${t} steps`);
    }
    const kv = await heat(page, 'kv-table');
    sameMatrix(kv, K.map((k, i) => k.concat(V[i])), 'cached K|V');
    const w = await heat(page, 'map-step-weights');
    sameMatrix(w, base.weights, 'decode weights', 1e-12);
    const info = await page.textContent('#sess-info');
    assert(/softmax standard, scale 0\.707107, no bias, no RoPE; changes above apply to the next session/
      .test(info), `session info after softmax1 was chosen: ${info}`);
    await andWait(page, () => page.check('#sm-standard'));
    await page.click('#sess-end');
    await page.waitForFunction(() => /deleted/.test(document.getElementById('sess-info').textContent));
  });

  await step(`screenshot ${NAME}.png`, async () => {
    await page.screenshot({ path: join(SHOTS, `${NAME}.png`), fullPage: true });
  });

  await step('at 375 px: no sideways scrolling, maps readable', async () => {
    const phone = await context.newPage();
    await phone.setViewportSize({ width: 375, height: 812 });
    await phone.goto(PAGE);
    await phone.waitForFunction(() => Number(document.body.dataset.updates || 0) > 0 &&
      document.body.dataset.busy === '0', null, { timeout: 15000 });
    await andWait(phone, () => phone.check('#use-bk'));
    const width = await phone.evaluate(() => document.documentElement.scrollWidth);
    assert(width <= 375, `page is ${width}px wide`);
    const box = await phone.$eval('#map-weights table', (t) => t.getBoundingClientRect().right);
    assert(box <= 375, `weights map ends at ${box}px`);
    const sz = await phone.$eval('#map-weights td', (td) => parseFloat(getComputedStyle(td).fontSize));
    assert(sz >= 11, `heat map font ${sz}px`);
    await phone.screenshot({ path: join(SHOTS, `${NAME}-375.png`), fullPage: true });
    await phone.close();
  });

  await step('no uncaught script errors', async () => {
    assert(consoleErrors.length === 0, consoleErrors.join('; '));
  });
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}

finish();

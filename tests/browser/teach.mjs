// tests/browser/teach.mjs — the looking-and-dragging views in real headless
// Chromium (server/web/teach.js).
//
//   node teach.mjs --page URL --api URL --shots DIR
//
// Drags a key and b_K with real mouse events and checks the drawn weights
// equal attnd's numbers for the dragged vectors (and that b_K leaves them
// where they were), as a list and as bars beside each key in the plane
// (length = weight within a pixel), the sentence printing verify's
// max |Δp| as the checks do (2.78e-17); drags b_Q and checks they change; moves a handle with
// the arrow keys; steps through the stages and compares each row with the
// API's qk, scores, lse, weights and output; checks the head view's line
// opacities equal the weights; drives softmax1's mass below 0.01 with the
// quiet-heads slider (standard stays 1); renders a pasted 4-head 64-token
// request (canvas maps with thinned token tick labels); draws a window with
// sinks and segments apart from causal (pixels at the edges the API's
// masks imply); shows check 27's float16 drift as /v1/verify's numbers;
// pushes each handle to the edges with the keyboard (every tip, b_K's
// drawn from k1's, stays in the plane); runs axe-core (no serious or critical violation); no console errors;
// screenshots at 1400 px and 390 px into DIR of the worked example with
// both biases on, whose plane labels, bars and handles must not overlap.
// Ends with "N passed, N failed".
import { mkdirSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { arg, assert, close, finish, step } from './steps.mjs';

const PAGE = arg('page');
const API = arg('api');
const SHOTS = arg('shots', 'build/artifacts');
const HERE = dirname(fileURLToPath(import.meta.url));

async function apiPost(path, body) {
  const r = await fetch(API + path, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body) });
  return r.json();
}

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox'] });
const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
const errors = [];
page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
page.on('pageerror', (e) => errors.push(String(e)));

/* wait until the plane's request rounds settle past `after` */
async function settled(after) {
  await page.waitForFunction((n) => Number(document.body.dataset.geoRounds || 0) > n &&
    document.body.dataset.geoBusy === '0', after, { timeout: 10000 });
  await page.waitForTimeout(50);
}
const rounds = () => page.evaluate(() => Number(document.body.dataset.geoRounds || 0));
const drawn = () => page.$$eval('#geo-bars .bar-num', (e) => e.map((x) => Number(x.dataset.weight)));
/* the in-plane weight bars beside the keys: for key j its weight (data-weight),
 * the filled bar's drawn length in plane units (rendered px over the plane's
 * px per unit, so it holds at 390 px too), the track's (weight 1), and how
 * far the bar's middle sits from the key's handle */
const planeBars = () => page.evaluate(() => {
  const sv = document.getElementById('geo-svg');
  const k = sv.getBoundingClientRect().width / 360;
  return [...sv.querySelectorAll('.key-bar')].map((g) => {
    const j = Number(g.dataset.key);
    const f = g.querySelector('.key-bar-fill').getBoundingClientRect();
    const t = g.querySelector('.key-bar-track').getBoundingClientRect();
    const h = sv.querySelector(`[data-handle="k${j}"]`).getBoundingClientRect();
    const dist = Math.hypot((t.left + t.right) / 2 - (h.left + h.right) / 2, (t.top + t.bottom) / 2 - (h.top + h.bottom) / 2) / k;
    return { j, weight: Number(g.dataset.weight), len: f.width / k, full: Number(g.querySelector('.key-bar-track').getAttribute('width')), dist,
      label: g.getAttribute('aria-label') };
  });
});
/* the bars equal `want` (attnd's weights): length BAR_W·p within a pixel, label with p */
async function barsEqual(want, what) {
  const bars = await planeBars();
  assert(bars.length === want.length, `${bars.length} bars in the plane`);
  for (const b of bars) {
    close(b.weight, want[b.j], 1e-15, `${what}: bar ${b.j} weight`);
    close(b.len, b.full * want[b.j], 1, `${what}: bar ${b.j} length ${b.len} of ${b.full}`);
    assert(b.dist < 90, `${what}: bar ${b.j} is ${b.dist} px from its key`);
    assert(b.label.includes(want[b.j].toFixed(6)), `${what}: bar ${b.j} label ${b.label}`);
  }
  return bars;
}
/* no two of the plane's labels, weight bars and handles overlap (SVG units) */
async function noOverlap(what) {
  const boxes = await page.evaluate(() => {
    const sv = document.getElementById('geo-svg');
    const out = [];
    sv.querySelectorAll('.handle-label, .key-bar, .handle').forEach((e) => {
      const b = e.getBBox();
      out.push({ name: e.getAttribute('data-label') ? `label ${e.getAttribute('data-label')}` :
        e.getAttribute('data-handle') ? `handle ${e.getAttribute('data-handle')}` : `bar ${e.getAttribute('data-key')}`,
      x0: b.x, y0: b.y, x1: b.x + b.width, y1: b.y + b.height });
    });
    return out;
  });
  for (let a = 0; a < boxes.length; a++) {
    for (let b = a + 1; b < boxes.length; b++) {
      const p = boxes[a], q = boxes[b];
      if (p.name.startsWith('handle') && q.name.startsWith('handle')) continue; /* q sits on k1 */
      const hit = p.x0 < q.x1 && q.x0 < p.x1 && p.y0 < q.y1 && q.y0 < p.y1;
      assert(!hit, `${what}: ${p.name} overlaps ${q.name}`);
    }
  }
  for (const p of boxes) assert(p.x0 >= 0 && p.y0 >= 0 && p.x1 <= 360 && p.y1 <= 360, `${what}: ${p.name} leaves the plane`);
}
/* the vector a handle shows, from its aria-valuetext "(x, y)" */
async function vec(id) {
  const t = await page.getAttribute(`[data-handle="${id}"]`, 'aria-valuetext');
  const m = /\(([-\d.]+), ([-\d.]+)\)/.exec(t);
  return [Number(m[1]), Number(m[2])];
}
async function dragBy(id, dx, dy) {
  const box = await page.locator(`[data-handle="${id}"]`).boundingBox();
  const x = box.x + box.width / 2, y = box.y + box.height / 2;
  const before = await rounds();
  await page.mouse.move(x, y);
  await page.mouse.down();
  for (let i = 1; i <= 5; i++) await page.mouse.move(x + dx * i / 5, y + dy * i / 5);
  await page.mouse.up();
  await settled(before);
}
/* attnd's weights for the vectors the page shows now */
async function apiWeights(useBq, useBk) {
  const body = { q: [await vec('q')], k: [await vec('k0'), await vec('k1'), await vec('k2')],
    v: [[1, 0, 0], [0, 1, 0], [0, 0, 1]], scale: 1 / Math.sqrt(2), return: ['weights'] };
  const bias = {};
  if (useBq) bias.q = await vec('bq');
  if (useBk) bias.k = await vec('bk');
  if (useBq || useBk) body.bias = bias;
  return (await apiPost('/v1/attention', body)).weights[0];
}

await page.goto(PAGE);
await settled(0);

await step('the plane opens on the seed example: weights 0.575975, 0.283995, 0.140029', async () => {
  const w = await drawn();
  close(w[0], 0.575975, 5e-7, 'w1');
  close(w[1], 0.283995, 5e-7, 'w2');
  close(w[2], 0.140029, 5e-7, 'w3');
  await barsEqual(w, 'opening');
});

await step('check 27 (beit_key_bias_float16) is shown as a table equal to /v1/verify\'s numbers', async () => {
  const ver = await apiPost('/v1/verify', { q: [[1, 0]], k: [[1, 0], [0, 1], [-1, 0]],
    v: [[1, 0, 0], [0, 1, 0], [0, 0, 1]], scale: 1 / Math.sqrt(2), softmax: 'standard',
    bias: { q: [0, 1], k: [3, -2] } });
  const c = ver.checks.find((x) => x.name === 'beit_key_bias_float16');
  assert(c && c.data && c.data.bk_size.length > 3, 'verify has no float16 check');
  assert(await page.isVisible('#geo-half'), 'the float16 box is hidden');
  const head = await page.textContent('#geo-half');
  assert(head.includes(`Check ${c.id} (beit_key_bias_float16) ${c.passed ? 'holds' : 'fails'}`), head);
  const rows = await page.$$eval('#geo-half tbody tr', (trs) => trs.map((tr) => ({
    size: Number(tr.querySelector('th').textContent),
    f16: tr.querySelector('[data-col="float16"]').dataset.value,
    f64: tr.querySelector('[data-col="float64"]').dataset.value,
    text: tr.querySelector('[data-col="float16"]').textContent })));
  assert(rows.length === c.data.bk_size.length, `${rows.length} rows`);
  rows.forEach((r, i) => {
    assert(r.size === c.data.bk_size[i], `size ${i}: ${r.size}`);
    const want16 = c.data.weight_error_float16[i], want64 = c.data.weight_change_float64[i];
    assert(r.f16 === (want16 === null ? 'null' : String(want16)), `float16 ${i}: ${r.f16} vs ${want16}`);
    assert(r.f64 === (want64 === null ? 'null' : String(want64)), `float64 ${i}: ${r.f64} vs ${want64}`);
    if (want16 !== null) close(Number(r.text), want16, Math.abs(want16) * 5e-3, `shown float16 ${i}`);
  });
  /* float16 drifts far past float64's rounding once b_K is large */
  const last = c.data.weight_error_float16.filter((x) => x !== null).pop();
  assert(last > 1e-3 && c.data.weight_change_float64.every((x) => x === null || x < 1e-9), 'no drift shown');
});

await step('dragging a key (real mouse events) redraws attnd\'s weights for it', async () => {
  const k2 = await vec('k1');
  await dragBy('k1', 40, -30);
  const k2b = await vec('k1');
  assert(k2b[0] !== k2[0] || k2b[1] !== k2[1], `k2 did not move: ${k2} -> ${k2b}`);
  const w = await drawn(), want = await apiWeights(false, false);
  want.forEach((x, j) => close(w[j], x, 1e-15, `weight ${j}`));
  await barsEqual(want, 'after dragging k2');
});

let before;
await step('dragging b_K moves every key by the same vector and the weights stay put', async () => {
  const r0 = await rounds();
  await page.check('#geo-use-bk');
  await settled(r0);
  before = await drawn();
  const bars0 = await barsEqual(before, 'b_K on');
  const bk = await vec('bk');
  await dragBy('bk', -50, 35);
  const bk2 = await vec('bk');
  assert(bk2[0] !== bk[0], `b_K did not move: ${bk} -> ${bk2}`);
  const w = await drawn(), want = await apiWeights(false, true);
  want.forEach((x, j) => close(w[j], x, 1e-15, `weight ${j} vs API`));
  before.forEach((x, j) => close(w[j], x, 1e-12, `weight ${j} moved`));
  const bars1 = await barsEqual(want, 'after dragging b_K');
  bars1.forEach((b, j) => close(b.len, bars0[j].len, 1e-6, `bar ${j} length moved`));
  const why = await page.textContent('#geo-why');
  assert(/stay put/.test(why) && /check 3/.test(why), `sentence: ${why}`);
});

await step('the b_K sentence prints verify\'s max |Δp| as the checks do (1.23e-17, not 17 digits)', async () => {
  await page.focus('[data-handle="bk"]');
  let seen = null;
  for (let i = 0; i < 12 && !seen; i++) {
    const r0 = await rounds();
    await page.keyboard.press('ArrowRight');
    await settled(r0);
    const ver = await apiPost('/v1/verify', { q: [await vec('q')], k: [await vec('k0'), await vec('k1'), await vec('k2')],
      v: [[1, 0, 0], [0, 1, 0], [0, 0, 1]], scale: 1 / Math.sqrt(2), softmax: 'standard',
      bias: { q: await vec('bq'), k: await vec('bk') } });
    const c3 = ver.checks.find((c) => c.name === 'k_bias_weights_unchanged');
    if (c3.max_abs_diff !== 0) seen = { d: c3.max_abs_diff, why: await page.textContent('#geo-why') };
  }
  assert(seen, 'b_K never gave a max |Δp| other than 0');
  const want = `max |Δp| = ${seen.d.toExponential(2)},`;
  assert(seen.why.includes(want), `sentence "${seen.why}" lacks "${want}"`);
});

await step('dragging b_Q changes the weights (and the sentence says why)', async () => {
  const r0 = await rounds();
  await page.check('#geo-use-bq');
  await settled(r0);
  const w0 = await drawn();
  await dragBy('bq', 45, 40);
  const w = await drawn(), want = await apiWeights(true, true);
  want.forEach((x, j) => close(w[j], x, 1e-15, `weight ${j} vs API`));
  assert(w.some((x, j) => Math.abs(x - w0[j]) > 1e-3), `weights did not change: ${w0} -> ${w}`);
  const bars = await barsEqual(want, 'after dragging b_Q');
  assert(bars.some((b) => Math.abs(b.len - b.full * w0[b.j]) > 2), 'no bar changed by more than 2 px');
  const why = await page.textContent('#geo-why');
  assert(/b_Q adds/.test(why), 'no b_Q sentence');
  /* the number is check 4's change of the k2−k1 score difference, scale·b_Q·(k2−k1) */
  const bq = await vec('bq'), k1 = await vec('k0'), k2 = await vec('k1');
  const dc = (bq[0] * (k2[0] - k1[0]) + bq[1] * (k2[1] - k1[1])) / Math.sqrt(2);
  const m = /k2−k1 score difference moves by (-?[\d.]+)/.exec(why);
  assert(m && Math.abs(Number(m[1]) - dc) < 1e-6, `sentence ${why} vs ${dc}`);
});

await step('arrow keys move a focused handle (keyboard), weights follow', async () => {
  const q0 = await vec('q');
  await page.focus('[data-handle="q"]');
  const r0 = await rounds();
  await page.keyboard.press('ArrowUp');
  await page.keyboard.press('ArrowUp');
  await settled(r0);
  const q1 = await vec('q');
  close(q1[1], q0[1] + 0.2, 1e-9, 'q moved by two steps');
  const w = await drawn(), want = await apiWeights(true, true);
  want.forEach((x, j) => close(w[j], x, 1e-15, `weight ${j} vs API`));
  const label = await page.getAttribute('[data-handle="q"]', 'aria-label');
  assert(label && label.includes('arrow keys'), 'handle has no label');
});

await step('the stepper walks q·k → scale → softcap → bias → mask → softmax → weights → output, each row equal to the API', async () => {
  const body = await page.evaluate(() => null);
  void body;
  const q = await vec('q'), bq = await vec('bq'), bk = await vec('bk');
  const ks = [await vec('k0'), await vec('k1'), await vec('k2')];
  const res = await apiPost('/v1/attention', { q: [q], k: ks, v: [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
    scale: 1 / Math.sqrt(2), bias: { q: bq, k: bk }, return: ['qk', 'scores', 'weights', 'output', 'lse'] });
  const expect = {
    qk: res.qk[0], scaled: res.qk[0].map((x) => x * res.meta.scale), softcap: res.qk[0].map((x) => x * res.meta.scale),
    bias: res.scores[0], mask: res.scores[0], softmax: [Math.exp(res.lse[0])], weights: res.weights[0],
    output: res.output[0],
  };
  const ids = Object.keys(expect);
  for (let i = 0; i < ids.length; i++) {
    const cur = await page.getAttribute('.stage[aria-current="step"]', 'data-stage');
    assert(cur === ids[i], `stage ${i} is ${cur}, expected ${ids[i]}`);
    const vals = await page.$$eval(`.stage[data-stage="${ids[i]}"] .num`, (e) => e.map((x) => Number(x.dataset.value)));
    expect[ids[i]].forEach((x, j) => close(vals[j], x, 1e-12 * (1 + Math.abs(x)), `${ids[i]}[${j}]`));
    if (i < ids.length - 1) await page.click('#step-next');
  }
  assert(await page.isDisabled('#step-next'), 'next stays enabled at the last stage');
  assert((await page.textContent('#steps-now')).includes('8 of 8'), 'stage not announced');
});

await step('quiet heads: shifting the scores drives softmax1\'s mass below 0.01, standard stays 1', async () => {
  const q0 = await page.evaluate(() => Number(document.body.dataset.quietRounds || 0));
  await page.fill('#quiet', '-12');
  await page.waitForFunction((n) => Number(document.body.dataset.quietRounds || 0) > n &&
    document.body.dataset.geoBusy === '0', q0, { timeout: 10000 });
  await page.waitForTimeout(300);
  const m1 = Number(await page.getAttribute('#quiet-mass1', 'data-mass'));
  const m0 = Number(await page.getAttribute('#quiet-mass0', 'data-mass'));
  assert(m1 < 0.01, `softmax1 mass ${m1}`);
  close(m0, 1, 0, 'standard mass');
  await page.fill('#quiet', '0');
  await settled(await rounds() - 1);
});

await step('the default pasted request draws a head view whose line opacities equal the weights', async () => {
  await page.waitForFunction(() => Number(document.body.dataset.modelRounds || 0) > 0, null, { timeout: 10000 });
  const req = JSON.parse(await page.inputValue('#paste'));
  req.return = ['weights'];
  const res = await apiPost('/v1/attention', req);
  const lines = await page.$$eval('#head-view line', (e) => e.map((l) => [Number(l.dataset.i),
    Number(l.dataset.j), Number(l.getAttribute('stroke-opacity'))]));
  assert(lines.length > 10, `only ${lines.length} lines`);
  for (const [i, j, o] of lines) close(o, res.weights[0][i][j], 1e-15, `line ${i}-${j}`);
  const toks = await page.$$eval('#head-view text.tok', (e) => e.map((t) => t.textContent));
  assert(toks[1] === 'cat', `tokens ${toks}`);
  await page.hover('#head-view text.tok[data-i="3"]');
  const shown = await page.$$eval('#head-view line', (e) => e.filter((l) => Number(l.getAttribute('stroke-opacity')) > 0)
    .map((l) => Number(l.dataset.i)));
  assert(shown.length > 0 && shown.every((i) => i === 3), `hover shows rows ${[...new Set(shown)]}`);
  const masked = await page.textContent('#model-status');
  assert(/causal/.test(masked), `masks not named: ${masked}`);
});

await step('a pasted 4-head 64-token request renders (canvas maps, entropy and mass per row)', async () => {
  const H = 4, L = 64, d = 8;
  const t = (a, b, c) => Math.round(Math.sin(a * 1.3 + b * 0.7 + c * 2.1) * 1000) / 1000;
  const m = (s) => Array.from({ length: H }, (_, h) => Array.from({ length: L }, (_, i) =>
    Array.from({ length: d }, (_, c) => t(h + s, i, c))));
  const req = { q: m(0), k: m(5), v: m(9), causal: true, window: undefined,
    tokens: { q: Array.from({ length: L }, (_, i) => `t${i}`), k: Array.from({ length: L }, (_, i) => `t${i}`) } };
  const r0 = await page.evaluate(() => Number(document.body.dataset.modelRounds || 0));
  await page.fill('#paste', JSON.stringify(req));
  await page.click('#paste-draw');
  await page.waitForFunction((n) => Number(document.body.dataset.modelRounds || 0) > n, r0, { timeout: 15000 });
  assert(await page.$$eval('#heat-grid canvas', (e) => e.length) === H, 'not 4 maps');
  assert(await page.$$eval('#row-stats tr', (e) => e.length) === L, 'not 64 rows of stats');
  assert(await page.$$eval('#model td, #model th', (e) => e.length) < 400, 'maps built from DOM cells');
  const res = await apiPost('/v1/attention', { ...req, return: ['stats'] });
  const ent = await page.$$eval('#row-stats tr', (e) => e.map((r) => Number(r.children[1].textContent)));
  ent.forEach((x, i) => close(x, res.stats.entropy[0][i], 6e-4, `entropy row ${i}`));
});

/* the canvas pixel (CSS px x, y) of head h's map as [r, g, b] */
async function pixel(h, x, y) {
  return page.evaluate(([hh, px, py]) => {
    const cv = document.querySelector(`#heat-grid canvas[data-head="${hh}"]`);
    const k = cv.width / parseFloat(cv.style.width);
    const d = cv.getContext('2d').getImageData(Math.floor(px * k), Math.floor(py * k), 1, 1).data;
    return [d[0], d[1], d[2]];
  }, [h, x, y]);
}
const near = (c, rgb, tol = 60) => c.every((v, i) => Math.abs(v - rgb[i]) <= tol);
/* ink (non-white pixels) in a rectangle of head h's map */
async function ink(h, x0, y0, w, hgt) {
  return page.evaluate(([hh, a, b, ww, hh2]) => {
    const cv = document.querySelector(`#heat-grid canvas[data-head="${hh}"]`);
    const k = cv.width / parseFloat(cv.style.width);
    const d = cv.getContext('2d').getImageData(a * k, b * k, ww * k, hh2 * k).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i] < 200 && d[i + 3] > 0) n++;
    return n;
  }, [h, x0, y0, w, hgt]);
}

await step('the 64-token maps carry token tick labels, thinned so they do not touch', async () => {
  const maps = await page.$$eval('#heat-grid canvas', (e) => e.map((c) => ({ ...c.dataset })));
  for (const m of maps) {
    const cell = Number(m.cell), tq = m.ticksQ.split(',').map(Number), tk = m.ticksK.split(',').map(Number);
    const step = tq[1] - tq[0];
    assert(step > 1 && step * cell >= 12, `labels every ${step} of ${cell} px`);
    assert(tq[0] === 0 && tk[0] === 0 && tq.length === Math.ceil(64 / step) && tk.length === tq.length,
      `ticks ${m.ticksQ}`);
    assert(Number(m.ox) >= 20 && Number(m.oy) >= 20, `no room for labels: ${m.ox}, ${m.oy}`);
  }
  /* the left margin holds the query labels, the top margin the key labels */
  const m0 = maps[0], ox = Number(m0.ox), oy = Number(m0.oy);
  assert(await ink(0, 0, oy, ox - 2, 40) > 30, 'no query labels drawn');
  assert(await ink(0, ox, 0, 40, oy - 2) > 30, 'no key labels drawn');
  assert((await page.$$eval('#heat-legend li', (e) => e.map((l) => l.textContent))).some((t) => /every \d+ tokens labelled/.test(t)),
    'the key does not say labels are thinned');
});

await step('a window with sinks and segments: band, sinks and segment blocks drawn apart from causal', async () => {
  const L = 64, d = 8, seg = Array.from({ length: L }, (_, i) => (i < 40 ? 0 : 1));
  const t = (a, b, c) => Math.round(Math.sin(a * 1.3 + b * 0.7 + c * 2.1) * 1000) / 1000;
  const m = (s) => Array.from({ length: L }, (_, i) => Array.from({ length: d }, (_, c) => t(s, i, c)));
  const toks = Array.from({ length: L }, (_, i) => `w${i}`);
  const req = { q: m(1), k: m(4), v: m(7), causal: true, window: { left: 8, sinks: 4 },
    segments: { q: seg, k: seg }, tokens: { q: toks, k: toks } };
  const r0 = await page.evaluate(() => Number(document.body.dataset.modelRounds || 0));
  await page.fill('#paste', JSON.stringify(req));
  await page.click('#paste-draw');
  await page.waitForFunction((n) => Number(document.body.dataset.modelRounds || 0) > n, r0, { timeout: 15000 });
  const ds = await page.$eval('#heat-grid canvas', (c) => ({ ...c.dataset }));
  assert(ds.overlays === 'causal,window,sinks,segments', `overlays ${ds.overlays}`);
  const legend = await page.$$eval('#heat-legend li', (e) => e.map((l) => l.dataset.overlay));
  for (const o of ['causal', 'window', 'sinks', 'segments']) assert(legend.includes(o), `key lacks ${o}`);
  const cell = Number(ds.cell), ox = Number(ds.ox), oy = Number(ds.oy);
  const RED = [185, 28, 28], TEAL = [4, 120, 87], PURPLE = [126, 34, 206];
  /* the API agrees on what the drawing claims: row 20 sees sinks 0..3 and keys 12..20 */
  const res = await apiPost('/v1/attention', { ...req, return: ['scores'] });
  const row = res.scores[20];
  assert(row.every((x, j) => (x !== null) === (j < 4 || (j >= 12 && j <= 20))), `row 20: ${row.map((x) => (x === null ? 0 : 1)).join('')}`);
  /* causal edge right of key i, band edge left of key i - 8 (rows 12..36 of the first segment) */
  let red = 0, teal = 0, rows = 0;
  for (let i = 12; i <= 36; i += 2) {
    const y = oy + (i + 0.5) * cell;
    rows++;
    if (near(await pixel(0, ox + (i + 1) * cell - 0.5, y), RED)) red++;
    if (near(await pixel(0, ox + (i - 8) * cell - 0.5, y), TEAL)) teal++;
  }
  assert(red === rows, `causal edge on ${red} of ${rows} rows`);
  assert(teal >= rows / 2, `window band edge on ${teal} of ${rows} rows (dashed)`);
  /* the sinks' bar above keys 0..3 and 40..43 (positions restart in segment 1), not above key 20 */
  assert(near(await pixel(0, ox + 1.5 * cell, oy - 3), PURPLE), 'no sink bar over key 1');
  assert(near(await pixel(0, ox + 41.5 * cell, oy - 3), PURPLE), 'no sink bar over key 41');
  assert(!near(await pixel(0, ox + 20.5 * cell, oy - 3), PURPLE), 'a sink bar over key 20');
  /* the segment boundary: a dark dotted line between rows 39 and 40 */
  let dark = 0;
  for (let j = 0; j < 30; j++) {
    const c = await pixel(0, ox + j * cell + 1, oy + 40 * cell + 0.25);
    if (c.every((v) => v < 100)) dark++;
  }
  assert(dark >= 8, `segment boundary dark on ${dark} of 30 keys`);
  const status = await page.textContent('#model-status');
  assert(/window with 4 sinks/.test(status) && /segments/.test(status), status);
});

await step('a pasted request with a heads selection and weights_top_k draws the chosen heads, named', async () => {
  const m = (s) => Array.from({ length: 3 }, (_, h) => Array.from({ length: 5 }, (_, i) =>
    [Math.sin(h + i + s), Math.cos(2 * h + i * s)]));
  const req = { q: m(1), k: m(2), v: m(3), heads: [2, 0], weights_top_k: 2, encoding: 'base64' };
  const r0 = await page.evaluate(() => Number(document.body.dataset.modelRounds || 0));
  await page.fill('#paste', JSON.stringify(req));
  await page.click('#paste-draw');
  await page.waitForFunction((n) => Number(document.body.dataset.modelRounds || 0) > n, r0, { timeout: 15000 });
  const caps = await page.$$eval('#heat-grid figcaption', (e) => e.map((c) => c.textContent));
  assert(caps.join('|') === 'head 2|head 0', `maps ${caps}`);
  const opts = await page.$$eval('#model-head option', (e) => e.map((o) => o.textContent));
  assert(opts.join('|') === 'head 2|head 0', `head choices ${opts}`);
  await page.selectOption('#model-head', '1');
  const chosen = await page.$$eval('#heat-grid figure', (e) => e.map((f) => f.classList.contains('chosen')));
  assert(chosen.join() === 'false,true', `chosen map ${chosen}`);
  for (const bad of ['null', '[1, 2]', JSON.stringify({ ...req, q: [m(1)] })]) {
    await page.fill('#paste', bad);
    await page.click('#paste-draw');
    const t = await page.textContent('#model-error');
    assert(/^Not sent/.test(t), `${bad.slice(0, 20)}: ${t}`);
  }
});

await step('typing mistakes are not blamed on attnd', async () => {
  await page.fill('#paste', '{"q": [[1,0]');
  await page.click('#paste-draw');
  const t = await page.textContent('#model-error');
  assert(/^Not sent/.test(t) && !/attnd answered/.test(t), `error: ${t}`);
});

await step('a decode step and ending the session leave the results headline alone', async () => {
  const head = await page.textContent('#status');
  await page.click('#sess-start');
  await page.waitForFunction(() => !document.getElementById('step-box').disabled, null, { timeout: 10000 });
  await page.click('#step');
  await page.waitForFunction(() => /Decode step done/.test(document.getElementById('sess-status').textContent),
    null, { timeout: 10000 });
  assert(!/Decode step/.test(await page.textContent('#status')), 'results headline took the decode news');
  await page.click('#sess-end');
  await page.waitForFunction(() => /ended/.test(document.getElementById('sess-status').textContent));
  const after = await page.textContent('#status');
  assert(!/Decode step/.test(after) && after === head, `headline after ending: ${after}`);
});

await step('every handle stays in the plane: a key pushed to the edge stops where b_K\'s tip meets it', async () => {
  const r0 = await rounds();
  if (!(await page.isChecked('#geo-use-bk'))) await page.check('#geo-use-bk');
  const bk = await vec('bk');
  for (const [id, keys] of [['k0', ['Shift+ArrowRight', 'Shift+ArrowDown']], ['q', ['Shift+ArrowLeft', 'Shift+ArrowUp']],
    ['bk', ['Shift+ArrowLeft', 'Shift+ArrowUp']], ['bq', ['Shift+ArrowRight', 'Shift+ArrowDown']]]) {
    await page.focus(`[data-handle="${id}"]`);
    for (const key of keys) for (let i = 0; i < 20; i++) await page.keyboard.press(key);
    const out = await page.$$eval('#geo-svg .handle', (cs) => cs.map((c) => [c.getAttribute('data-handle'),
      Number(c.getAttribute('cx')), Number(c.getAttribute('cy'))]).filter(([, x, y]) => x < -0.5 || y < -0.5 || x > 360.5 || y > 360.5));
    assert(out.length === 0, `after pushing ${id}: ${JSON.stringify(out)} off the 360 px plane`);
    if (id === 'k0') {
      const bk2 = await vec('bk');
      assert(bk2[0] === bk[0] && bk2[1] === bk[1], `pushing k1 changed b_K: ${bk} -> ${bk2}`);
    }
  }
  await settled(r0);
  const w = await drawn(), want = await apiWeights(await page.isChecked('#geo-use-bq'), true);
  want.forEach((x, j) => close(w[j], x, 1e-15, `weight ${j} vs API at the edges`));
});

await step('axe-core: no serious or critical violation', async () => {
  await page.addScriptTag({ path: join(HERE, 'node_modules', 'axe-core', 'axe.min.js') });
  const r = await page.evaluate(async () => window.axe.run(document, { resultTypes: ['violations'] }));
  const bad = r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert(bad.length === 0, bad.map((v) => `${v.id} (${v.impact}): ${v.nodes.slice(0, 3).map((n) => n.target).join(' ')}`).join('; '));
});

mkdirSync(SHOTS, { recursive: true });
await step('screenshots at 1400 px and 390 px', async () => {
  await page.fill('#paste', await page.evaluate(() => '')); // restore the default example below
  await page.reload();
  await settled(0);
  await page.waitForFunction(() => Number(document.body.dataset.modelRounds || 0) > 0);
  /* the worked example with both biases on: k1=(1,0), k2=(0,1), k3=(-1,0), q=(1,0), b_Q=(0,1), b_K=(3,-2) */
  for (const id of ['#geo-use-bq', '#geo-use-bk']) {
    const r0 = await rounds();
    await page.check(id);
    await settled(r0);
  }
  await barsEqual(await apiWeights(true, true), 'worked example, 1400 px');
  await noOverlap('worked example, 1400 px');
  await page.screenshot({ path: join(SHOTS, 'teach-1400.png'), fullPage: true });
  /* the two teaching sections alone, at a size a reader can inspect */
  await page.locator('#look').screenshot({ path: join(SHOTS, 'teach-1400-look.png') });
  await page.locator('#model').screenshot({ path: join(SHOTS, 'teach-1400-model.png') });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(200);
  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  assert(wide <= 392, `the page is ${wide} px wide at 390`);
  await barsEqual(await apiWeights(true, true), 'worked example, 390 px');
  await noOverlap('worked example, 390 px');
  await page.screenshot({ path: join(SHOTS, 'teach-390.png'), fullPage: true });
  await page.locator('#look').screenshot({ path: join(SHOTS, 'teach-390-look.png') });
  await page.locator('#model').screenshot({ path: join(SHOTS, 'teach-390-model.png') });
});

await step('no console errors', async () => {
  assert(errors.length === 0, errors.join(' | '));
});

await browser.close();
finish();

// tests/browser/model.mjs — "Paste from a model" (server/web/model.js) in
// real headless Chromium, for the inputs and readers the teach.mjs tour
// does not cover.
//
//   node model.mjs --page URL --api URL
//
// One head written with its heads axis ([1][n][d]) and a heads selection
// of one head: the row table and the maps' labels hold attnd's stats
// (no NaN, no false "masked"), and a row with no allowed key says so;
// mistakes and refusals are shown beside the paste panel and the old
// picture is cleared; each map is focusable and
// the arrow keys read its cells ("q → k: weight", attnd's weight);
// head-view tokens answer Enter and Space; long token labels stay inside
// the head view and the row table; "1 sink", "1 head", "1 query", "1 key"
// and "1 token" are singular, in the status and the limit; base64 tensors
// ({"shape","dtype","data"}) in q or k are held to the panel's 8 heads,
// 256 tokens and one sequence before anything is sent, and the 256 count
// queries as well as keys. Ends with "N passed, N failed".
import { chromium } from 'playwright-core';
import { arg, assert, close, finish, step } from './steps.mjs';

const PAGE = arg('page');
const API = arg('api');

async function apiPost(path, body) {
  const r = await fetch(API + path, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body) });
  return r.json();
}

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox'] });
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const errors = [];
page.on('pageerror', (e) => errors.push(String(e)));

const rounds = () => page.evaluate(() => Number(document.body.dataset.modelRounds || 0));
/* paste `text`, press Draw it, wait until it is drawn (or, with drawn false,
 * until the panel says it is not) */
async function draw(text, drawn = true) {
  const r0 = await rounds();
  await page.fill('#paste', typeof text === 'string' ? text : JSON.stringify(text));
  await page.click('#paste-draw');
  if (drawn) {
    await page.waitForFunction((n) => Number(document.body.dataset.modelRounds || 0) > n, r0, { timeout: 15000 });
  } else {
    await page.waitForFunction(() => /^Not drawn/.test(document.getElementById('model-status').textContent),
      null, { timeout: 5000 });
  }
}
const table = () => page.$$eval('#row-stats tr', (r) => r.map((tr) => Array.from(tr.children).map((c) => c.textContent)));
/* the row table equals attnd's stats of head h (rows of [n] arrays) */
function sameStats(rows, st, ks, what) {
  assert(rows.length === st.entropy.length, `${what}: ${rows.length} rows for ${st.entropy.length}`);
  rows.forEach((r, i) => {
    close(Number(r[1]), st.entropy[i], 6e-4, `${what}: entropy row ${i} (${r[1]})`);
    close(Number(r[2]), st.mass[i], 6e-4, `${what}: mass row ${i} (${r[2]})`);
    assert(r[3] === ks[st.argmax[i]], `${what}: argmax row ${i} is "${r[3]}", attnd says ${ks[st.argmax[i]]}`);
  });
}

await page.goto(PAGE);
await page.waitForFunction(() => Number(document.body.dataset.modelRounds || 0) > 0, null, { timeout: 15000 });

await step('one head written with its heads axis ([1][n][d]): the row table holds attnd\'s stats', async () => {
  const req = { q: [[[1, 0], [0, 1]]], k: [[[1, 0], [0, 1]]], v: [[[1], [2]]], tokens: { q: ['a', 'b'], k: ['a', 'b'] } };
  await draw(req);
  const res = await apiPost('/v1/attention', { ...req, return: ['stats'] });
  sameStats(await table(), { entropy: res.stats.entropy[0], mass: res.stats.mass[0], argmax: res.stats.argmax[0] },
    ['a', 'b'], '[1][2][2]');
  const label = await page.$eval('#heat-grid canvas', (c) => c.getAttribute('aria-label'));
  const mean = (res.stats.entropy[0][0] + res.stats.entropy[0][1]) / 2;
  assert(label.includes(`mean row entropy ${mean.toFixed(3)} nats`), `map label: ${label}`);
});

await step('a heads selection of one head of three: the table is that head\'s stats', async () => {
  const m = (s) => Array.from({ length: 3 }, (_, h) => Array.from({ length: 5 }, (_, i) =>
    [Math.sin(h + i + s), Math.cos(2 * h + i * s)]));
  const toks = ['p', 'q', 'r', 's', 't'];
  const req = { q: m(1), k: m(2), v: m(3), heads: [2], causal: true, tokens: { q: toks, k: toks } };
  await draw(req);
  const res = await apiPost('/v1/attention', { ...req, return: ['stats'] });
  const st = res.stats;
  const one = Array.isArray(st.entropy[0]) ? { entropy: st.entropy[0], mass: st.mass[0], argmax: st.argmax[0] } : st;
  const rows = await table();
  sameStats(rows, one, toks, 'heads [2]');
  assert(rows.every((r) => !/NaN|masked/.test(r.join(' '))), `table: ${JSON.stringify(rows)}`);
  const label = await page.$eval('#heat-grid canvas', (c) => c.getAttribute('aria-label'));
  assert(/^head 2 /.test(label) && !/NaN/.test(label), `map label: ${label}`);
});

await step('a row with no allowed key shows attnd\'s stats and says it has none, not "masked"', async () => {
  const req = { q: [[1, 0], [0, 1]], k: [[1, 0], [0, 1]], v: [[1], [2]], mask: [[true, true], [false, false]],
    tokens: { q: ['a', 'b'], k: ['a', 'b'] } };
  await draw(req);
  const res = await apiPost('/v1/attention', { ...req, return: ['stats'] });
  assert(res.meta.empty_rows.join() === '1' && res.stats.argmax[1] === null, `attnd: ${JSON.stringify(res)}`);
  const rows = await table();
  close(Number(rows[1][1]), res.stats.entropy[1], 6e-4, `entropy of the empty row (${rows[1][1]})`);
  close(Number(rows[1][2]), res.stats.mass[1], 6e-4, `mass of the empty row (${rows[1][2]})`);
  assert(rows[1][3] === 'no allowed key' && !/masked|NaN/.test(rows[1].join(' ')), `row: ${rows[1]}`);
});

await step('mistakes are shown beside the paste panel, the old picture is cleared', async () => {
  for (const [bad, want] of [['{"q": [[1,0]', /^Not sent: the pasted text is not JSON/],
    ['[1, 2]', /^Not sent: paste one JSON object/],
    [JSON.stringify({ q: [[1, 0]], k: [[1, 0], [0, 1]], v: [[1], [2], [3]] }), /^attnd answered 422 /]]) {
    await draw({ q: [[1, 0], [0, 1]], k: [[1, 0], [0, 1]], v: [[1], [2]] });
    assert(await page.$$eval('#heat-grid canvas', (c) => c.length) === 1, 'the good request is not drawn');
    await draw(bad, false);
    const box = await page.$eval('#model-error', (e) => ({ hidden: e.hidden, role: e.getAttribute('role'),
      text: e.textContent }));
    assert(!box.hidden && box.role === 'alert' && want.test(box.text), `${bad.slice(0, 20)}: ${JSON.stringify(box)}`);
    const near = await page.evaluate(() => {
      const b = document.getElementById('paste-draw').getBoundingClientRect();
      const e = document.getElementById('model-error').getBoundingClientRect();
      return Math.abs(e.top - b.bottom);
    });
    assert(near < 200, `the message is ${near} px from the Draw button`);
    assert(await page.$eval('#error', (e) => e.hidden), 'the paste mistake went to the Results section');
    const left = await page.evaluate(() => ({ maps: document.querySelectorAll('#heat-grid canvas').length,
      lines: document.querySelectorAll('#head-view line, #head-view text').length,
      rows: document.querySelectorAll('#row-stats tr').length,
      heads: document.querySelectorAll('#model-head option').length }));
    assert(Object.values(left).every((x) => x === 0), `the old picture stays: ${JSON.stringify(left)}`);
  }
  await draw({ q: [[1, 0], [0, 1]], k: [[1, 0], [0, 1]], v: [[1], [2]] });
  assert(await page.$eval('#model-error', (e) => e.hidden), 'the message stays after a good request');
});

await step('each map is a tab stop; the arrow keys read its cells with attnd\'s weights', async () => {
  const toks = ['The', 'cat', 'sat', 'on'];
  const m = (s) => Array.from({ length: 2 }, (_, h) => toks.map((_, i) => [Math.sin(h + i * s), Math.cos(h * s + i)]));
  const req = { q: m(1), k: m(2), v: m(3), causal: true, tokens: { q: toks, k: toks } };
  await draw(req);
  const res = await apiPost('/v1/attention', { ...req, return: ['weights'] });
  const cv = '#heat-grid canvas[data-head="1"]';
  assert(await page.getAttribute(cv, 'tabindex') === '0', 'the map is not focusable');
  await page.focus(cv);
  const readout = () => page.$eval('#heat-grid figure:nth-child(2) .cell-readout', (e) => e.textContent);
  let t = await readout();
  assert(t === `The \u2192 The: ${res.weights[1][0][0].toFixed(6)}`, `on focus: ${t}`);
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('ArrowRight');
  t = await readout();
  assert(t === `sat \u2192 cat: ${res.weights[1][2][1].toFixed(6)}`, `after down, down, right: ${t}`);
  await page.keyboard.press('ArrowRight');
  await page.keyboard.press('ArrowRight');
  t = await readout();
  assert(/^sat \u2192 on: masked/.test(t), `a masked cell reads ${t}`);
  await page.keyboard.press('End');
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('ArrowDown');
  t = await readout();
  assert(t === `on \u2192 on: ${res.weights[1][3][3].toFixed(6)}`, `at the last cell: ${t}`);
  const live = await page.$eval('#heat-grid figure:nth-child(2) .cell-readout', (e) => e.getAttribute('aria-live'));
  assert(live === 'polite', `readout aria-live ${live}`);
});

await step('head-view tokens answer Enter and Space (only their lines, pressed)', async () => {
  const tok = '#head-view text.tok[data-i="2"]';
  await page.focus(tok);
  await page.keyboard.press('Escape');
  const shown = () => page.$$eval('#head-view line', (e) => [...new Set(e.filter((l) =>
    Number(l.getAttribute('stroke-opacity')) > 0).map((l) => Number(l.dataset.i)))]);
  assert((await shown()).length > 1, 'Escape did not show every line');
  await page.keyboard.press('Enter');
  assert((await shown()).join() === '2', `Enter shows rows ${await shown()}`);
  assert(await page.getAttribute(tok, 'aria-pressed') === 'true', 'the token is not pressed');
  await page.keyboard.press('Space');
  assert((await shown()).length > 1, 'Space did not show every line again');
  assert(await page.getAttribute(tok, 'aria-pressed') === 'false', 'the token stays pressed');
});

await step('long token labels stay inside the head view and the row table', async () => {
  const long = 'x'.repeat(250);
  const toks = ['\u{1F600}', long, 'short', `${long}y`];
  const m = (s) => toks.map((_, i) => [Math.sin(i * s), Math.cos(i + s)]);
  await draw({ q: m(1), k: m(2), v: m(3), tokens: { q: toks, k: toks } });
  const boxes = await page.$$eval('#head-view text', (ts) => ts.map((t) => {
    const b = t.getBBox();
    return { x0: b.x, x1: b.x + b.width, text: t.textContent };
  }));
  for (const b of boxes) assert(b.x0 >= 0 && b.x1 <= 320, `"${b.text.slice(0, 12)}…" spans ${b.x0}..${b.x1}`);
  const names = await page.$$eval('#head-view text.tok', (ts) => ts.map((t) => t.getAttribute('aria-label')));
  assert(names[1].includes(long), 'a clipped token lost its full name');
  const over = await page.evaluate(() => {
    const box = document.querySelector('.row-stats-box').getBoundingClientRect();
    return Array.from(document.querySelectorAll('#row-stats th')).map((th) => th.getBoundingClientRect())
      .filter((r) => r.left < box.left - 0.5 || r.right > box.right + 0.5).length;
  });
  assert(over === 0, `${over} token labels leave the row table`);
});

await step('one sink is "1 sink"; one head, query and key are singular too', async () => {
  const m = (s) => Array.from({ length: 6 }, (_, i) => [Math.sin(i * s), Math.cos(i + s)]);
  await draw({ q: m(1), k: m(2), v: m(3), causal: true, window: { left: 2, sinks: 1 } });
  const s = await page.textContent('#model-status');
  assert(/window with 1 sink\b/.test(s) && !/1 sinks/.test(s), s);
  await draw({ q: [[1, 0]], k: [[0, 1]], v: [[1]] });
  const one = await page.textContent('#model-status');
  assert(one === '1 head, 1 query \u00D7 1 key.', one);
});

await step('pasted base64 tensors obey the 8-head / 256-token limit, nothing sent', async () => {
  /* {"shape","dtype","data"}: zeros of that shape as little-endian float32 */
  const b64 = (...shape) => ({ shape, dtype: 'float32',
    data: Buffer.from(new Float32Array(shape.reduce((a, b) => a * b, 1)).buffer).toString('base64') });
  const posts = [];
  const seen = (r) => { if (r.method() === 'POST' && r.url().endsWith('/v1/attention')) posts.push(r.url()); };
  page.on('request', seen);
  const limit = (h, L) => `Not sent: the page draws up to 8 heads and 256 tokens (this has ${h} head${h === 1 ? '' : 's'}, ${L} token${L === 1 ? '' : 's'}).`;
  const batch = /^Not sent: the page draws one sequence: paste q as \[heads\]\[n\]\[d_k\], not a batch \(rank 4\)/;
  for (const [what, req, want] of [
    ['9 heads, all base64', { q: b64(9, 2, 2), k: b64(9, 2, 2), v: b64(9, 2, 1) }, limit(9, 2)],
    ['9 heads of one token each', { q: b64(9, 1, 2), k: b64(9, 1, 2), v: b64(9, 1, 1) }, limit(9, 1)],
    ['9 query heads base64, k and v nested', { q: b64(9, 2, 2), k: [[1, 0], [0, 1]], v: [[1], [2]] }, limit(9, 2)],
    ['300 keys as a base64 [L][d] k', { q: [[1, 0]], k: b64(300, 2), v: b64(300, 1) }, limit(1, 300)],
    ['300 keys as a base64 [h][L][d] k', { q: [[[1, 0]], [[0, 1]]], k: b64(2, 300, 2), v: b64(2, 300, 1) }, limit(2, 300)],
    ['a base64 [B][h][n][d] q', { q: b64(1, 2, 2, 2), k: b64(1, 2, 2, 2), v: b64(1, 2, 2, 1) }, batch]]) {
    await draw({ q: [[1, 0], [0, 1]], k: [[1, 0], [0, 1]], v: [[1], [2]] });
    posts.length = 0;
    await draw(req, false);
    const box = await page.$eval('#model-error', (e) => (e.hidden ? '' : e.textContent));
    assert(typeof want === 'string' ? box === want : want.test(box), `${what}: error box "${box}"`);
    await page.waitForTimeout(300);     /* a request sent anyway would show by now */
    assert(posts.length === 0, `${what}: ${posts.length} request(s) sent`);
    assert(await page.$$eval('#heat-grid canvas', (c) => c.length) === 0, `${what}: maps drawn`);
  }
  page.off('request', seen);
  await draw({ q: b64(2, 3, 2), k: b64(2, 256, 2), v: b64(2, 256, 1) });
  assert(await page.$$eval('#heat-grid canvas', (c) => c.length) === 2, '2 heads, 256 keys in base64 not drawn');
  assert(await page.$eval('#model-error', (e) => e.hidden), 'an error stays after a base64 request within the limit');
});

await step('300 query tokens over 2 keys are over the 256-token limit too, nothing sent', async () => {
  const posts = [];
  const seen = (r) => { if (r.method() === 'POST' && r.url().endsWith('/v1/attention')) posts.push(r.url()); };
  await draw({ q: [[1, 0], [0, 1]], k: [[1, 0], [0, 1]], v: [[1], [2]] });
  page.on('request', seen);
  const q = Array.from({ length: 300 }, (_, i) => [Math.sin(i), Math.cos(i)]);
  try {
    await draw({ q, k: [[1, 0], [0, 1]], v: [[1], [2]] }, false);
  } finally {
    page.off('request', seen);
  }
  const box = await page.$eval('#model-error', (e) => (e.hidden ? '' : e.textContent));
  assert(box === 'Not sent: the page draws up to 8 heads and 256 tokens (this has 1 head, 300 tokens).', `error box "${box}"`);
  assert(posts.length === 0, `${posts.length} request(s) sent`);
});

await step('no uncaught script errors', async () => {
  assert(errors.length === 0, errors.join(' | '));
});

await browser.close();
finish();

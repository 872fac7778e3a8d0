// tests/browser/stale.mjs — numbers on the teaching page that must not
// outlive the inputs they were computed for, in real headless Chromium.
//
//   node stale.mjs --page URL --api URL
//
// An option field that is on but holds no number (custom scale, RoPE base:
// a number input reads "" for "1e") is not sent as null, which attnd takes
// as "use the default", neither for the maps nor for a session; the
// plane's weights, bars, stages and quiet-heads masses are taken down when
// its request fails, with the error beside them; an older quiet-heads
// round answered after a
// newer one (held back here by the test, as a slow network would) does not
// overwrite the newer masses; the Results maps and the claims are taken
// down when attnd refuses the inputs (or /v1/verify fails) or a cell holds
// no number; nor does an older pasted-model Draw (an answer or a
// refusal) replace the newer one's picture or message; the four-case
// table, computed without a causal mask or RoPE, does not call its row
// the one shown above when the maps have either; while attnd has not
// answered an edit the status says it computes, not "Updated". Ends with
// "N passed, N failed".
import { chromium } from 'playwright-core';
import { andWait as waitRound, arg, assert, close, finish, postJson, step } from './steps.mjs';

const PAGE = arg('page');
const API = arg('api');

const apiPost = (path, body) => postJson(API, path, body);
/* the plane's request for its vectors (teach.js geoBody), as the API gets it */
function planeBody(k, extra) {
  return { q: [[1, 0]], k, v: [[1, 0, 0], [0, 1, 0], [0, 0, 1]], scale: 1 / Math.SQRT2,
    softmax: 'standard', ...extra };
}

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox'] });
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const errors = [];
page.on('pageerror', (e) => errors.push(String(e)));

const andWait = (action) => waitRound(page, action);
const geoRounds = () => page.evaluate(() => Number(document.body.dataset.geoRounds || 0));
async function geoSettled(after) {
  await page.waitForFunction((n) => Number(document.body.dataset.geoRounds || 0) > n &&
    document.body.dataset.geoBusy === '0', after, { timeout: 20000 });
}
const quietRounds = () => page.evaluate(() => Number(document.body.dataset.quietRounds || 0));
async function quietPast(n) {
  await page.waitForFunction((m) => Number(document.body.dataset.quietRounds || 0) >= m, n, { timeout: 20000 });
}
/* types text into a number input the way a learner does, key by key */
async function typeInto(sel, text) {
  await page.fill(sel, '');
  await page.type(sel, text);
}
const shown = (sel) => page.$eval(sel, (e) => (e.hidden ? '' : e.textContent));
/* holds back the /v1/attention requests whose body pick(body) takes, as a
 * slow network would; held: their routes, all: settles once count are held */
async function holdAttention(pick, count) {
  const held = [];
  let done;
  const all = new Promise((res) => { done = res; });
  await page.route('**/v1/attention', (route) => {
    if (!pick(JSON.parse(route.request().postData() || '{}'))) return route.continue();
    held.push(route);
    if (held.length === count) done();
  });
  return { held, all };
}

await page.goto(PAGE);
await page.waitForFunction(() => Number(document.body.dataset.updates || 0) > 0 &&
  document.body.dataset.busy === '0' && document.body.dataset.geoBusy === '0' &&
  Number(document.body.dataset.quietRounds || 0) > 0, null, { timeout: 15000 });

/* option field sel, switched on by check, typed "1e": not sent, named as
 * what and marked; returns once the error is read */
async function notSent(check, sel, what) {
  await andWait(() => page.check(check));
  await andWait(() => typeInto(sel, '1e'));
  const err = await shown('#error');
  assert(err.startsWith(`Not sent: ${what} is not a number`), `error box: ${err}`);
  assert((await page.getAttribute(sel, 'aria-invalid')) === 'true', `${sel} is not marked`);
  const status = await page.textContent('#status');
  assert(!/^Updated/.test(status), `status: ${status}`);
}

await step('a custom scale that is not a number is not sent (attnd would use its default)', async () => {
  await notSent('#use-scale', '#scale', 'the custom scale');
  await andWait(() => typeInto('#scale', '2'));
  assert((await shown('#error')) === '', 'error still shown with scale 2');
  assert((await page.getAttribute('#scale', 'aria-invalid')) === null, 'the scale field is still marked');
  const want = (await apiPost('/v1/attention', { q: [[1, 0]], k: [[1, 0], [0, 1], [-1, 0]],
    v: [[1, 0, 0], [0, 1, 0], [0, 0, 1]], scale: 2 })).weights[0];
  const got = await page.$$eval('#map-weights td[data-value]', (t) => t.map((x) => Number(x.dataset.value)));
  want.forEach((w, j) => close(got[j], w, 1e-15, `weight ${j} at scale 2`));
  await andWait(() => page.uncheck('#use-scale'));
});

await step('a RoPE base that is not a number is not sent, nor used to start a session', async () => {
  try {
    await notSent('#use-rope', '#rope-base', 'the RoPE base');
    await page.click('#sess-start');
    await page.waitForFunction(() => document.body.dataset.busy === '0');
    assert(await page.$eval('#sess-end', (b) => b.disabled), 'a session was started with the default base');
    /* said in the decode section, where the button is, as every other
     * answer to a decode button is (decode.js sessError); it was said in
     * the Results box, which a learner at the decode section does not see
     * and which the next edit empties */
    const err = await shown('#sess-error');
    assert(err.startsWith('Not sent: the RoPE base is not a number'), `decode error box after start: ${err}`);
  } finally {                         /* a failure above leaves the next steps a good base */
    await andWait(() => typeInto('#rope-base', '10000'));
    await andWait(() => page.uncheck('#use-rope'));
  }
  assert((await shown('#error')) === '', 'error still shown');
});

/* the page pointed at api ('' = the attnd that served it) */
async function pointAt(api) {
  const n = await geoRounds();
  await andWait(async () => { await page.fill('#api-base', api); await page.press('#api-base', 'Tab'); });
  await geoSettled(n);
}

/* with attnd out of reach, k2 moved by the keyboard: what the plane shows */
async function failedPlane() {
  await pointAt('http://127.0.0.1:1');
  const n = await geoRounds();
  await page.focus('[data-handle="k1"]');
  await page.keyboard.press('ArrowUp');             /* k2 (0, 1) -> (0, 1.1) */
  await geoSettled(n);
  const label = await page.textContent('[data-label="k1"]');
  assert(/\(0, 1\.1\)/.test(label), `k2 drawn at ${label}`);
  const err = await shown('#geo-error');
  assert(/^No answer from attnd/.test(err), `plane error box: ${err}`);
  const left = await page.evaluate(() => ({
    bars: [...document.querySelectorAll('#geo-bars .bar-num')].map((e) => e.textContent),
    keyBars: [...document.querySelectorAll('#geo-svg .key-bar-num')].map((e) => e.textContent),
    stages: document.querySelectorAll('#steps-rows .stage').length,
    masses: ['quiet-mass1', 'quiet-mass0'].map((id) => document.getElementById(id).textContent +
      (document.getElementById(id).dataset.mass === undefined ? '' : ' ' + document.getElementById(id).dataset.mass)) }));
  assert(left.bars.length === 0 && left.stages === 0 && left.keyBars.every((t) => t === '\u2026') &&
    left.masses.every((t) => t === '\u2026'), `weights of the old vectors still drawn: ${JSON.stringify(left)}`);
  assert(await page.$eval('#step-next', (b) => b.disabled) && await page.$eval('#step-prev', (b) => b.disabled),
    'the stepper offers stages of no answer');
}

await step('a plane request that fails takes its weights down and says why beside them', async () => {
  try {
    await failedPlane();
  } finally {
    if (await page.inputValue('#api-base')) await pointAt('');
  }
  assert((await shown('#geo-error')) === '', 'plane error still shown');
  const want = (await apiPost('/v1/attention', planeBody([[1, 0], [0, 1.1], [-1, 0]]))).weights[0];
  const got = await page.$$eval('#geo-bars .bar-num', (e) => e.map((x) => Number(x.dataset.weight)));
  assert(got.length === 3, `${got.length} bars`);
  want.forEach((w, j) => close(got[j], w, 1e-15, `plane weight ${j}`));
  assert((await page.$$eval('#steps-rows .stage', (s) => s.length)) === 8, 'stages not drawn again');
});

await step('quiet heads: an older round answered last does not overwrite the newer masses', async () => {
  const { held, all: bothHeld } = await holdAttention((b) =>
    JSON.stringify(b.return) === '["stats"]' && b.attn_bias && b.attn_bias[0][0] === -10, 2);
  const q0 = await quietRounds();
  let n = await geoRounds();
  await page.$eval('#quiet', (e) => { e.value = '-10'; e.dispatchEvent(new Event('input', { bubbles: true })); });
  await Promise.race([bothHeld, page.waitForTimeout(20000).then(() => {
    throw new Error('the quiet-heads requests of shift -10 never came');
  })]);                                              /* round 1's masses, held back */
  await geoSettled(n);
  n = await geoRounds();
  await page.$eval('#quiet', (e) => { e.value = '0'; e.dispatchEvent(new Event('input', { bubbles: true })); });
  await geoSettled(n);
  await quietPast(q0 + 1);                           /* round 2's masses answered */
  for (const r of held) await r.continue();
  await quietPast(q0 + 2);                           /* and now round 1's */
  await page.unroute('**/v1/attention');
  const k = [[1, 0], [0, 1.1], [-1, 0]];
  const m1 = (await apiPost('/v1/attention', planeBody(k, { softmax: 'softmax1', return: ['stats'] }))).stats.mass[0];
  const got = await page.$eval('#quiet-mass1', (e) => Number(e.dataset.mass));
  close(got, m1, 1e-15, 'softmax1 mass drawn at shift 0');
  assert((await page.textContent('#quiet-out')) === '0.0', 'slider not at 0');
});

await step('the results and claims are taken down when the inputs are refused or no number', async () => {
  /* what the Results and claims panels hold of the last answer */
  const held = () => page.evaluate(() => ({
    cells: document.querySelectorAll('#map-scores td[data-value], #map-weights td[data-value], #map-output td[data-value]').length,
    meta: document.getElementById('meta').textContent,
    changes: document.getElementById('changes').textContent,
    claims: document.querySelectorAll('#claim-checks .check, #decode-check .check, #all-checks .check').length,
    cases: document.querySelectorAll('#cases tr[data-condition]').length }));
  const empty = async (what) => {
    const h = await held();
    assert(h.cells === 0 && !h.meta && !h.changes && h.claims === 0 && h.cases === 0, `${what}: ${JSON.stringify(h)}`);
  };
  const cell = '#grid-k input[data-r="1"][data-c="0"]';
  await andWait(() => page.fill(cell, '0.5'));
  assert((await held()).cells === 9, `the maps are not drawn: ${JSON.stringify(await held())}`);
  await andWait(async () => { await page.check('#use-scale'); await typeInto('#scale', '0'); });
  assert(/^attnd answered 422/.test(await shown('#error')), `error box: ${await shown('#error')}`);
  await empty('scale 0, refused by attnd');
  await andWait(() => page.uncheck('#use-scale'));
  assert((await held()).cells === 9, 'the maps are not back after the fix');
  await andWait(() => page.fill(cell, 'abc'));
  await empty('a K cell holding "abc"');
  await andWait(() => page.fill(cell, '0'));
  await page.route('**/v1/verify', (route) => route.fulfill({ status: 503, contentType: 'application/json',
    body: '{"error":{"code":"overloaded","message":"held back by the test","path":null}}' }));
  try {
    await andWait(() => page.check('#use-bv'));
  } finally {
    await page.unroute('**/v1/verify');
  }
  const h = await held();
  assert(h.cells === 9 && h.claims === 0 && h.cases === 0, `verify refused: ${JSON.stringify(h)}`);
  assert(/could not run/.test(await page.textContent('#claim-checks')), 'the claims do not say why they are missing');
  await andWait(() => page.uncheck('#use-bv'));
  assert((await held()).claims > 0, 'the checks are not back');
});

await step('pasted model: an older Draw answered last is not drawn over the newer one', async () => {
  const toks = (a) => [a, `${a}2`];
  const req = (a, good = true) => ({ q: [[1, 0], [0, 1]], k: [[1, 0], [0, 1]],
    v: good ? [[1], [2]] : [[1], [2], [3]], tokens: { q: toks(a), k: toks(a) } });
  const rows = () => page.$$eval('#row-stats th', (t) => t.map((x) => x.textContent));
  for (const [older, what] of [[req('older'), 'an older answer'], [req('refused', false), 'an older refusal'],
    ['{"q": [[1, 0]', 'a newer typing mistake']]) {
    let held = null;
    let gotHeld;
    const isHeld = new Promise((res) => { gotHeld = res; });
    const mark = typeof older === 'string' ? 'newest' : older.tokens.q[0];
    await page.route('**/v1/attention', (route) => {
      const b = route.request().postData() || '';
      if (b.includes(`"${mark}"`) && !held) { held = route; gotHeld(); return; }
      route.continue();
    });
    const r0 = await page.evaluate(() => Number(document.body.dataset.modelRounds || 0));
    if (typeof older === 'string') {             /* a good request held, then a mistake typed */
      await page.fill('#paste', JSON.stringify(req('newest')));
      await page.click('#paste-draw');
      await isHeld;
      await page.fill('#paste', older);
      await page.click('#paste-draw');
    } else {
      await page.fill('#paste', JSON.stringify(older));
      await page.click('#paste-draw');
      await isHeld;
      await page.fill('#paste', JSON.stringify(req('newer')));
      await page.click('#paste-draw');
      await page.waitForFunction((n) => Number(document.body.dataset.modelRounds || 0) > n, r0, { timeout: 15000 });
    }
    const done = page.waitForEvent('requestfinished', (r) => (r.postData() || '').includes(`"${mark}"`));
    await held.continue();
    await done;
    await page.waitForTimeout(300);
    await page.unroute('**/v1/attention');
    if (typeof older === 'string') {
      const status = await page.textContent('#model-status');
      assert(/^Not drawn/.test(status) && (await rows()).length === 0, `${what}: status "${status}", rows ${await rows()}`);
      assert(/^Not sent: the pasted text is not JSON/.test(await shown('#model-error')), `${what}: error box "${await shown('#model-error')}"`);
    } else {
      assert((await rows()).join() === toks('newer').join(), `${what}: the row table reads ${await rows()}`);
      assert((await shown('#model-error')) === '', `${what}: error box "${await shown('#model-error')}"`);
    }
  }
});

await step('the four-case table calls its row "shown above" only when the maps are computed as it is', async () => {
  /* /v1/verify takes no causal mask and its table leaves RoPE out: under
   * either the maps above hold other weights than the table's row */
  const row = () => page.evaluate(() => {
    const tr = document.querySelector('#cases tr.current');
    return { caption: document.querySelector('#cases caption').textContent,
      head: tr.querySelector('th').textContent, weights: tr.querySelectorAll('td')[1].textContent,
      map: '(' + [...document.querySelectorAll('#map-weights td[data-value]')].map((t) => t.textContent).join(', ') + ')' };
  });
  let r = await row();
  assert(/\(shown above\)$/.test(r.head) && r.weights === r.map, `no mask, no RoPE: ${JSON.stringify(r)}`);
  for (const [what, on, off] of [
    ['the causal mask', () => page.selectOption('#causal', 'top_left'), () => page.selectOption('#causal', 'none')],
    ['RoPE', () => page.check('#use-rope'), () => page.uncheck('#use-rope')]]) {
    await andWait(on);
    r = await row();
    assert(r.weights !== r.map, `${what}: the map equals the table's row: ${JSON.stringify(r)}`);
    assert(!/shown above/.test(r.head) && r.caption.includes(`without ${what}`), `${what}: ${JSON.stringify(r)}`);
    await andWait(off);
  }
});

await step('while attnd has not answered an edit, the status does not call the maps updated', async () => {
  const { held, all: seen } = await holdAttention((b) => b.return === undefined, 1);   /* the Results' */
  const cell = '#grid-k input[data-r="1"][data-c="0"]';
  try {
    await andWait(async () => {
      await page.fill(cell, '0.5');
      await Promise.race([seen, page.waitForTimeout(10000).then(() => { throw new Error('no request'); })]);
      const line = await page.textContent('#status');
      assert(!/^Updated/.test(line) && /^Computing \(K edited\)/.test(line), `status while attnd computes: ${line}`);
      for (const r of held) await r.continue();
    });
  } finally {
    await page.unroute('**/v1/attention');
    for (const r of held) await r.continue().catch(() => {});
  }
  assert(/^Updated \(K edited\)/.test(await page.textContent('#status')), `status: ${await page.textContent('#status')}`);
  await andWait(() => page.fill(cell, '0'));
});

await step('no uncaught script errors', async () => {
  assert(errors.length === 0, errors.join(' | '));
});

await browser.close();
finish();

// tests/browser/access.mjs — the teaching page's accessibility and layout
// beyond the default example, in real headless Chromium.
//
//   node access.mjs --page URL --api URL
//
// An invalid cell does not leave the results aria-busy, and stays marked
// when the grids are drawn again (a row or width added); a button that
// gets disabled under the keyboard (Remove the last extra row, the last
// stage) hands its focus to its partner; a cell past the
// largest double is said not sent, not sent as null; a row attnd's
// error path marked is unmarked, every cell of it, once attnd takes the
// inputs; every heat-map
// colour keeps its text at 4.5:1 (the whole ramp, and a weight of 0.80 on
// the page); the focus ring is 3:1 against the panels and the page; with
// 10 queries × 60 tokens the status stays short and the scrolling maps are
// tab stops with names (axe scrollable-region-focusable); no sideways
// scrolling at 320 px; printing keeps the heat-map colours; the count of
// checks leaves out the ones that do not apply; an unreachable attnd is
// not called an answer; at 375 px an error naming a long URL wraps in its
// box; a decode step attnd refuses is said in the decode section, one
// answered after its session was ended is not drawn nor an error; a
// double click starts one session; a proxy's HTML error page is said by
// its title, a 200 that is no JSON as no answer of attnd (the page not
// left busy); the status calls only a 4xx about the body a refusal of the
// inputs. Ends with "N passed, N failed".
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { arg, assert, finish, step } from './steps.mjs';

const PAGE = arg('page');
const HERE = dirname(fileURLToPath(import.meta.url));

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox'] });
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const errors = [];
page.on('pageerror', (e) => errors.push(String(e)));

/* WCAG 2 contrast of two colours given as CSS rgb() or #rrggbb / #rgb */
function rgb(s) {
  if (s[0] === '#') {
    const h = s.length === 4 ? s.slice(1).split('').map((c) => c + c).join('') : s.slice(1);
    return [0, 2, 4].map((i) => parseInt(h.slice(i, i + 2), 16));
  }
  return (s.match(/\d+(\.\d+)?/g) || []).slice(0, 3).map(Number);
}
function lum(c) {
  const l = c.map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
  return 0.2126 * l[0] + 0.7152 * l[1] + 0.0722 * l[2];
}
function contrast(a, b) {
  const [x, y] = [lum(rgb(a)), lum(rgb(b))].sort((p, q) => q - p);
  return (x + 0.05) / (y + 0.05);
}

const updates = () => page.evaluate(() => Number(document.body.dataset.updates || 0));
async function andWait(action) {
  const before = await updates();
  await action();
  await page.waitForFunction((n) => Number(document.body.dataset.updates || 0) > n &&
    document.body.dataset.busy === '0', before, { timeout: 20000 });
}

await page.goto(PAGE);
await page.waitForFunction(() => Number(document.body.dataset.updates || 0) > 0 &&
  document.body.dataset.busy === '0', null, { timeout: 15000 });

await step('an invalid cell shows its message without leaving the results aria-busy', async () => {
  const cell = '#grid-k input[data-r="1"][data-c="0"]';
  for (const bad of ['abc', '']) {
    await page.fill(cell, bad);
    await page.waitForFunction(() => document.getElementById('status').textContent === 'Waiting for a valid number.');
    await page.waitForTimeout(300);
    const busy = await page.evaluate(() => [document.getElementById('results').getAttribute('aria-busy'),
      document.body.dataset.busy]);
    assert(busy.join() === 'false,0', `"${bad}": aria-busy ${busy[0]}, data-busy ${busy[1]}`);
  }
  await andWait(() => page.fill(cell, '0'));
});

await step('a cell holding no number stays marked when a row or width is added or removed', async () => {
  const cell = '#grid-k input[data-r="1"][data-c="0"]';
  await andWait(() => page.fill(cell, 'abc'));
  try {
    for (const button of ['#kv-add', '#q-add', '#dv-add', '#q-del', '#kv-del', '#dv-del']) {
      await andWait(() => page.click(button));
      const marked = await page.$$eval('#controls [aria-invalid="true"]', (es) => es.map((e) => e.getAttribute('aria-label')));
      assert(marked.join() === 'K row 2 column 1', `after ${button}: marked ${JSON.stringify(marked)}, ` +
        `error "${await page.textContent('#error')}"`);
    }
  } finally {
    await andWait(() => page.click('#reset'));    /* the worked example, whose k2 is (0, 1) */
  }
  assert((await page.$$('#controls [aria-invalid="true"]')).length === 0, 'a mark left after the fix');
});

await step('a button disabled under the keyboard hands its focus on, not to the page', async () => {
  const focused = () => page.evaluate(() => document.activeElement.id);
  await andWait(() => page.click('#q-add'));
  await page.focus('#q-del');
  await andWait(() => page.keyboard.press('Enter'));          /* back to one query: Remove is disabled */
  assert((await focused()) === 'q-add', `focus on "${await focused()}" after removing the last extra row`);
  await page.focus('#step-next');
  for (let i = 0; i < 7; i++) await page.keyboard.press('Enter');   /* to the last of the 8 stages */
  assert(await page.$eval('#step-next', (b) => b.disabled), 'not at the last stage');
  assert((await focused()) === 'step-prev', `focus on "${await focused()}" at the last stage`);
  for (let i = 0; i < 7; i++) await page.keyboard.press('Enter');   /* back to the first */
  assert((await focused()) === 'step-next', `focus on "${await focused()}" at the first stage`);
});

await step('the scale slider is read as the two decimals shown, not 1/sqrt(2) in 16 digits', async () => {
  const said = () => page.$eval('#geo-scale', (r) => [r.getAttribute('aria-valuetext'),
    document.getElementById('geo-scale-out').textContent]);
  let [text, shown] = await said();
  assert(text === '0.71' && shown === '0.71', `at the start: aria-valuetext ${text}, shown ${shown}`);
  await page.focus('#geo-scale');
  await page.keyboard.press('End');
  [text, shown] = await said();
  assert(text === '3.00' && shown === '3.00', `at the end: aria-valuetext ${text}, shown ${shown}`);
  await page.$eval('#geo-scale', (r) => {          /* back to 1/sqrt(2) for the steps after */
    r.value = '0.7071067811865476';
    r.dispatchEvent(new Event('input'));
  });
  [text, shown] = await said();
  assert(text === '0.71' && shown === '0.71', `back: aria-valuetext ${text}, shown ${shown}`);
});

await step('a cell past the largest double (1e400) is not sent as null, which attnd calls no number', async () => {
  const cell = '#grid-q input[data-r="0"][data-c="0"]';
  for (const big of ['1e400', '-1e400']) {
    await andWait(() => page.fill(cell, big));
    const said = await page.evaluate(() => [document.getElementById('status').textContent,
      document.getElementById('error').textContent]);
    assert(said[0] === 'Waiting for a valid number.' && /^Not sent: .*too large/.test(said[1]),
      `${big}: ${JSON.stringify(said)}`);
    assert((await page.getAttribute(cell, 'aria-invalid')) === 'true', `${big}: the cell is not marked`);
  }
  await andWait(() => page.fill(cell, '1'));
});

await step('a row attnd names in an error is unmarked once attnd takes the inputs', async () => {
  /* q = (1e308, 0) with b_K: the score overflows, attnd answers at /q/0, the
   * whole row is marked, its second cell never typed in */
  const invalid = () => page.$$eval('#controls [aria-invalid="true"]', (es) => es.map((e) => e.getAttribute('aria-label')));
  const first = '#grid-q input[data-r="0"][data-c="0"]';
  await andWait(() => page.check('#use-bk'));
  await andWait(() => page.fill(first, '1e308'));
  const marked = await invalid();
  assert(marked.join() === 'Q row 1 column 1,Q row 1 column 2', `marked after the overflow: ${marked}`);
  await andWait(() => page.fill(first, '1'));
  assert(/^Updated/.test(await page.textContent('#status')), 'attnd did not take q = (1, 0)');
  const left = await invalid();
  assert(left.length === 0, `still marked after attnd took the inputs: ${left}`);
  await andWait(() => page.uncheck('#use-bk'));
});

await step('every heat-map colour keeps its text at 4.5:1 (weights 0..1, scores of both signs)', async () => {
  const pairs = await page.evaluate(() => {
    const out = [];
    for (let a = 0; a <= 1000; a++) {
      const t = a / 1000;
      out.push(['weights', t, window.attnd.cellColour(t, 'weights', 1)]);
      out.push(['scores', t, window.attnd.cellColour(t * 3, 'scores', 3)]);
      out.push(['scores', -t, window.attnd.cellColour(-t * 3, 'scores', 3)]);
    }
    return out;
  });
  const bad = pairs.filter(([, , c]) => contrast(c.fg, c.bg) < 4.5);
  assert(bad.length === 0, `${bad.length} colours under 4.5:1, e.g. ${bad.slice(0, 3).map(([k, t, c]) =>
    `${k} ${t}: ${c.fg} on ${c.bg} ${contrast(c.fg, c.bg).toFixed(2)}`).join('; ')}`);
});

await step('a weight of 0.80 on the page: its cell text at 4.5:1', async () => {
  await andWait(() => page.fill('#grid-k input[data-r="0"][data-c="0"]', '2.53'));
  const c = await page.$eval('#map-weights td[data-row="0"][data-col="0"]', (td) => ({
    v: Number(td.dataset.value), fg: getComputedStyle(td).color, bg: getComputedStyle(td).backgroundColor }));
  assert(c.v > 0.79 && c.v < 0.81, `weight ${c.v}`);
  assert(contrast(c.fg, c.bg) >= 4.5, `${c.fg} on ${c.bg}: ${contrast(c.fg, c.bg).toFixed(2)}`);
  await andWait(() => page.click('#reset'));
});

await step('the focus ring is 3:1 against the panels and the page (buttons and the plane\'s handles)', async () => {
  await page.focus('#reset');
  await page.keyboard.press('Shift+Tab');
  await page.keyboard.press('Tab');
  const s = await page.evaluate(() => {
    const el = document.activeElement;
    const panel = getComputedStyle(el.closest('.panel')).backgroundColor;
    return { id: el.id, ring: getComputedStyle(el).outlineColor, style: getComputedStyle(el).outlineStyle,
      panel, page: getComputedStyle(document.body).backgroundColor };
  });
  assert(s.id === 'reset' && s.style !== 'none', `focus on ${s.id}, outline ${s.style}`);
  assert(contrast(s.ring, s.panel) >= 3, `ring ${s.ring} on the panel ${s.panel}: ${contrast(s.ring, s.panel).toFixed(2)}`);
  assert(contrast(s.ring, s.page) >= 3, `ring ${s.ring} on the page ${s.page}: ${contrast(s.ring, s.page).toFixed(2)}`);
  await page.focus('[data-handle="k1"]');
  const h = await page.$eval('[data-handle="k1"]', (c) => getComputedStyle(c).stroke);
  assert(contrast(h, 'rgb(255, 255, 255)') >= 3, `handle ring ${h}: ${contrast(h, '#fff').toFixed(2)}`);
});

await step('an attnd that cannot be reached is not called an answer', async () => {
  await andWait(async () => { await page.fill('#api-base', 'http://127.0.0.1:1'); await page.press('#api-base', 'Tab'); });
  const err = await page.textContent('#error');
  const status = await page.textContent('#status');
  assert(/^No answer from attnd: Could not reach attnd/.test(err) && !/answered network/.test(err), `error: ${err}`);
  assert(!/\.\./.test(status) && !/refused/.test(status), `status: ${status}`);
  await andWait(async () => { await page.fill('#api-base', ''); await page.press('#api-base', 'Tab'); });
});

await step('the count of checks that hold leaves out the ones that do not apply', async () => {
  const c = await page.evaluate(() => ({ text: document.getElementById('all-checks-count').textContent,
    all: document.querySelectorAll('#all-checks .check').length,
    na: document.querySelectorAll('#all-checks .check.na').length,
    pass: document.querySelectorAll('#all-checks .check.pass').length }));
  assert(c.na > 0, `no check is marked not applicable on the worked example: ${JSON.stringify(c)}`);
  const want = `${c.pass} of ${c.all - c.na} hold; ${c.na} not applicable`;
  assert(c.text === want, `"${c.text}", want "${want}"`);
});

await step('printing keeps the heat-map and bar colours (print-color-adjust: exact)', async () => {
  await page.emulateMedia({ media: 'print' });
  const adj = await page.evaluate(() => ['#map-weights td[data-value]', '#geo-bars .bar', '#quiet-bar1',
    '.heat-grid canvas'].map((s) => {
    const e = document.querySelector(s);
    return [s, e ? getComputedStyle(e).printColorAdjust : 'missing'];
  }));
  await page.emulateMedia({ media: 'screen' });
  const bad = adj.filter(([, v]) => v !== 'exact');
  assert(bad.length === 0, bad.map(([s, v]) => `${s}: ${v}`).join('; '));
});

await step('no sideways scrolling at 320 px', async () => {
  await page.setViewportSize({ width: 320, height: 800 });
  await page.waitForTimeout(200);
  const w = await page.evaluate(() => document.documentElement.scrollWidth);
  const wide = await page.evaluate(() => Array.from(document.querySelectorAll('.panel *'))
    .filter((e) => e.getBoundingClientRect().right > 320.5 && !e.closest('.heat, .cases-box, .grid-holder, .row-stats-box'))
    .slice(0, 4).map((e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className} ${e.getBoundingClientRect().right}`));
  assert(w <= 320 && wide.length === 0, `page ${w} px wide; past the edge: ${wide.join(', ')}`);
  await page.setViewportSize({ width: 1280, height: 900 });
});

await step('at 375 px an error naming a long API base URL wraps inside its box', async () => {
  await page.setViewportSize({ width: 375, height: 800 });
  const url = 'http://127.0.0.1:1' + '/attnd.proxy.internal'.repeat(5);
  await andWait(async () => { await page.fill('#api-base', url); await page.press('#api-base', 'Tab'); });
  await page.waitForFunction(() => ['error', 'geo-error', 'model-error'].every((id) =>
    !document.getElementById(id).hidden), null, { timeout: 10000 });
  const boxes = await page.evaluate(() => ['error', 'geo-error', 'model-error'].map((id) => {
    const e = document.getElementById(id);
    return [id, e.scrollWidth, e.clientWidth, Math.round(e.getBoundingClientRect().right)];
  }));
  const w = await page.evaluate(() => document.documentElement.scrollWidth);
  await andWait(async () => { await page.fill('#api-base', ''); await page.press('#api-base', 'Tab'); });
  await page.setViewportSize({ width: 1280, height: 900 });
  for (const [id, sw, cw, right] of boxes) assert(sw <= cw && right <= 375, `#${id}: ${sw} px of text in ${cw}, right edge ${right}`);
  assert(w <= 375, `page ${w} px wide`);
});

await step('a decode step attnd refuses says so in the decode section, and it stays', async () => {
  await page.click('#sess-start');
  await page.waitForFunction(() => !document.getElementById('step-box').disabled, null, { timeout: 10000 });
  const id = /^Session (\S+) started/.exec(await page.textContent('#sess-info'))[1];
  const api = new URL(page.url()).origin;
  await fetch(`${api}/v1/sessions/${encodeURIComponent(id)}`, { method: 'DELETE' });   /* gone, as on expiry */
  await page.click('#step');
  await page.waitForFunction(() => document.body.dataset.busy === '0');
  const seen = () => page.evaluate(() => {
    const box = document.querySelector('#decode .error:not([hidden])');
    return { decode: box ? box.textContent : '', role: box && box.getAttribute('role'),
      results: document.getElementById('error').hidden ? '' : document.getElementById('error').textContent };
  });
  let s = await seen();
  assert(/^attnd answered 404 /.test(s.decode) && s.role === 'alert', `decode section: ${JSON.stringify(s)}`);
  assert(s.results === '', `the decode error went to the Results: ${s.results}`);
  await andWait(() => page.fill('#grid-k input[data-r="1"][data-c="0"]', '0'));   /* an edit and its update */
  s = await seen();
  assert(/^attnd answered 404 /.test(s.decode), `an update wiped the decode error: ${JSON.stringify(s)}`);
  await page.click('#sess-end');
  await page.waitForFunction(() => /ended/.test(document.getElementById('sess-status').textContent));
});

await step('a decode step answered after its session was ended draws nothing and says no error', async () => {
  await page.click('#sess-start');
  await page.waitForFunction(() => !document.getElementById('step-box').disabled, null, { timeout: 10000 });
  let release;
  const held = new Promise((r) => { release = r; });
  let answered;
  const done = new Promise((r) => { answered = r; });
  /* the step reaches attnd and is answered; the page gets the answer late */
  await page.route('**/v1/sessions/*/attention', async (route) => {
    const r = await route.fetch();
    await held;
    await route.fulfill({ response: r });
    answered();
  });
  try {
    await page.click('#step');
    await page.waitForTimeout(200);
    await page.click('#sess-end');
    await page.waitForFunction(() => /deleted/.test(document.getElementById('sess-info').textContent));
    release();
    await done;
    await page.waitForTimeout(500);
  } finally {
    await page.unroute('**/v1/sessions/*/attention');
  }
  const s = await page.evaluate(() => ({
    error: document.getElementById('sess-error').hidden ? '' : document.getElementById('sess-error').textContent,
    weights: document.querySelectorAll('#map-step-weights td').length,
    status: document.getElementById('sess-status').textContent,
    info: document.getElementById('sess-info').textContent }));
  assert(s.error === '' && s.weights === 0 && s.status === 'Session ended.' && /deleted/.test(s.info),
    `after the late answer: ${JSON.stringify(s)}`);
});

await step('a double click on "Start a session" starts one session, not two', async () => {
  const posts = [];
  const seen = (r) => { if (r.method() === 'POST' && /\/v1\/sessions$/.test(r.url())) posts.push(r.url()); };
  page.on('request', seen);
  await page.dblclick('#sess-start');
  await page.waitForFunction(() => !document.getElementById('step-box').disabled, null, { timeout: 10000 });
  await page.waitForTimeout(300);
  page.off('request', seen);
  await page.click('#sess-end');
  await page.waitForFunction(() => /deleted/.test(document.getElementById('sess-info').textContent));
  assert(posts.length === 1, `${posts.length} sessions created (one is never deleted)`);
  await page.route('**/v1/sessions', (route) => route.fulfill({ status: 503, contentType: 'application/json',
    body: '{"error":{"code":"capacity_exhausted","message":"held back by the test","path":null}}' }));
  try {
    await page.click('#sess-start');
    await page.waitForFunction(() => !document.getElementById('sess-error').hidden, null, { timeout: 10000 });
  } finally {
    await page.unroute('**/v1/sessions');
  }
  assert(!(await page.$eval('#sess-start', (b) => b.disabled)), 'a refused start leaves the button disabled');
});

await step('an HTML error page from a proxy in front of attnd is said in a line, not as markup', async () => {
  const html = '<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n' +
    `<hr><center>nginx</center>\r\n${'<!-- a padding to disable MSIE and Chrome friendly error page -->\r\n'.repeat(6)}</body>\r\n</html>\r\n`;
  await page.route('**/v1/attention', (route) => route.fulfill({ status: 502, contentType: 'text/html', body: html }));
  try {
    await andWait(() => page.fill('#grid-k input[data-r="1"][data-c="0"]', '0.25'));
  } finally {
    await page.unroute('**/v1/attention');
  }
  const err = await page.$eval('#error', (e) => (e.hidden ? '' : e.textContent));
  const status = await page.textContent('#status');
  assert(err === 'attnd answered 502 http_502: 502 Bad Gateway', `error box: ${JSON.stringify(err.slice(0, 160))}`);
  assert(!/</.test(status) && status.length < 120, `status: ${JSON.stringify(status.slice(0, 160))}`);
  await andWait(() => page.fill('#grid-k input[data-r="1"][data-c="0"]', '0'));
});

await step('a 200 that is no JSON (a web server\'s page at the API base URL) is said, the page not left busy', async () => {
  const html = '<!doctype html><html><head><title>Welcome to nginx!</title></head><body>hello</body></html>';
  await page.route('**/v1/**', (route) => route.fulfill({ status: 200, contentType: 'text/html', body: html }));
  try {
    await andWait(() => page.fill('#grid-k input[data-r="1"][data-c="0"]', '0.75'));
    const err = await page.$eval('#error', (e) => (e.hidden ? '' : e.textContent));
    assert(/no JSON object \(Welcome to nginx!\)/.test(err), `error box: ${JSON.stringify(err.slice(0, 160))}`);
    assert(/^Not updated: attnd answered 200/.test(await page.textContent('#status')), 'status');
    const before = await page.evaluate(() => Number(document.body.dataset.geoRounds || 0));
    await page.focus('[data-handle="k1"]');
    await page.keyboard.press('ArrowRight');
    await page.waitForFunction((n) => Number(document.body.dataset.geoRounds || 0) > n &&
      document.body.dataset.geoBusy === '0', before, { timeout: 10000 });
    const geo = await page.$eval('#geo-error', (e) => (e.hidden ? '' : e.textContent));
    assert(/no JSON object/.test(geo), `plane's error: ${JSON.stringify(geo.slice(0, 160))}`);
  } finally {
    await page.unroute('**/v1/**');
  }
  const before = await page.evaluate(() => Number(document.body.dataset.geoRounds || 0));
  await page.keyboard.press('ArrowLeft');
  await page.waitForFunction((n) => Number(document.body.dataset.geoRounds || 0) > n &&
    document.body.dataset.geoBusy === '0', before, { timeout: 10000 });
  assert((await page.$$('#geo-bars .bar-num')).length === 3, 'the plane drew no weights after attnd answered again');
  await andWait(() => page.fill('#grid-k input[data-r="1"][data-c="0"]', '0'));
  assert(await page.$eval('#error', (e) => e.hidden), 'the error box stays after attnd answered');
});

await step('a 401 or a 504 is not called a refusal of the inputs', async () => {
  for (const [status, code] of [[401, 'unauthorized'], [504, 'deadline_exceeded']]) {
    await page.route('**/v1/attention', (route) => route.fulfill({ status, contentType: 'application/json',
      body: JSON.stringify({ error: { code, message: `held back by the test as ${code}`, path: null } }) }));
    try {
      await andWait(() => page.fill('#grid-k input[data-r="1"][data-c="0"]', String(status)));
    } finally {
      await page.unroute('**/v1/attention');
    }
    const line = await page.textContent('#status');
    assert(!/refused the inputs/.test(line) && new RegExp(`^Not updated: attnd answered ${status} ${code}: held back`).test(line),
      `${status}: status "${line}"`);
  }
  await andWait(() => page.fill('#grid-k input[data-r="1"][data-c="0"]', '0'));
  await page.fill('#scale', '0');     /* off: no round until it is switched on */
  assert(/^attnd refused the inputs/.test(await andWait(() => page.check('#use-scale'))
    .then(() => page.textContent('#status'))), 'a 422 (scale 0) is no longer called a refusal of the inputs');
  await andWait(() => page.uncheck('#use-scale'));
  await page.fill('#scale', '1');
});

await step('10 queries × 60 tokens: a short status, scrolling maps are named tab stops', async () => {
  for (let i = 0; i < 9; i++) await page.click('#q-add');
  for (let i = 0; i < 57; i++) await page.click('#kv-add');
  await andWait(() => page.click('#dk-add'));
  const dims = await page.evaluate(() => document.querySelectorAll('#map-weights tbody td').length);
  assert(dims === 600, `${dims} weights in the map`);
  const status = await page.textContent('#status');
  assert(status.length < 200 && /Updated/.test(status), `status of ${status.length} characters: ${status.slice(0, 120)}`);
  await page.addScriptTag({ path: join(HERE, 'node_modules', 'axe-core', 'axe.min.js') });
  const r = await page.evaluate(async () => window.axe.run(document,
    { runOnly: ['scrollable-region-focusable', 'aria-allowed-role', 'landmark-unique', 'region'] }));
  assert(r.violations.length === 0, r.violations.map((v) => `${v.id}: ${v.nodes.map((n) => n.target).join(' ')}`).join('; '));
  const regions = await page.evaluate(() => ['map-scores', 'map-weights', 'map-output', 'cases'].map((id) => {
    const e = document.getElementById(id);
    const by = e.getAttribute('aria-labelledby');
    return [id, e.scrollWidth > e.clientWidth, e.tabIndex, by ? document.getElementById(by).textContent : e.getAttribute('aria-label')];
  }));
  for (const [id, scrolls, tab, name] of regions) {
    assert(scrolls || id === 'map-output', `${id} does not scroll at 600 weights`);
    assert(tab === 0 && name && name.trim(), `${id}: tabindex ${tab}, name "${name}"`);
  }
});

await step('no uncaught script errors', async () => {
  assert(errors.length === 0, errors.join(' | '));
});

await browser.close();
finish();

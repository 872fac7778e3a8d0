// tests/browser/fields.mjs — the teaching page's own fields against what
// it sends, in real headless Chromium.
//
//   node fields.mjs --page URL --api URL --other URL
//
// --other: a second attnd that lets the page's origin call it (CORS).
// An API base URL without http:// or https:// is refused before anything
// is sent (it would be a path on the page's own server), and one ending in
// /v1 is taken without it; one given as ?api= with a stray % is taken as
// typed. attnd's error about an option the page sent
// (/scale, /rope/base, /sink_logit, ...) marks that option's field and
// names it, in the Results and when it refuses a decode session's start;
// the mark goes once attnd takes the request; axe-core finds no serious
// or critical violation with a field so marked. Changing the API base URL
// or key ends an open decode session on the attnd that started it (or
// forgets it when that attnd cannot delete it) and says so; the next
// session starts on the new one. Ends with "N passed, N failed".
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { andWait as waitRound, arg, assert, finish, step } from './steps.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const PAGE = arg('page');
const API = arg('api');
const OTHER = arg('other');

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox'] });
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const errors = [];
page.on('pageerror', (e) => errors.push(String(e)));
const sent = [];                     /* every URL the page asked for */
page.on('request', (r) => sent.push(r.url()));

const andWait = (action) => waitRound(page, action);
const shown = (sel) => page.$eval(sel, (e) => (e.hidden ? '' : e.textContent));
/* the page pointed at api ('' = the attnd that served it), as typed */
const pointAt = (api) => andWait(async () => { await page.fill('#api-base', api); await page.press('#api-base', 'Tab'); });

await page.goto(PAGE);
await page.waitForFunction(() => Number(document.body.dataset.updates || 0) > 0 &&
  document.body.dataset.busy === '0', null, { timeout: 15000 });

await step('an API base URL without http:// is refused before anything is sent', async () => {
  const hostPort = API.replace(/^https?:\/\//, '');
  sent.length = 0;
  try {
    await pointAt(hostPort);
    await page.waitForTimeout(300);           /* the plane's and the model panel's rounds */
    const err = await shown('#error');
    assert(/^Not sent: the API base URL .*http:\/\/ or https:\/\//.test(err), `error box: ${err}`);
    assert((await page.getAttribute('#api-base', 'aria-invalid')) === 'true', 'the field is not marked');
    assert(/valid API base URL/.test(await page.textContent('#status')), `status: ${await page.textContent('#status')}`);
    assert(/^Not sent/.test(await shown('#geo-error')), `plane: ${await shown('#geo-error')}`);
    const astray = sent.filter((u) => u.includes(hostPort + '/v1') && !u.startsWith(API));
    assert(astray.length === 0, `sent to ${astray.join(', ')}`);
  } finally {
    await pointAt('');
  }
  assert((await page.getAttribute('#api-base', 'aria-invalid')) === null, 'the field is still marked');
  assert((await shown('#error')) === '', `error box after emptying the field: ${await shown('#error')}`);
});

await step('an API base URL ending in /v1 is taken without it', async () => {
  sent.length = 0;
  try {
    await pointAt(API + '/v1/');
    const err = await shown('#error');
    assert(err === '', `error box: ${err}`);
    assert(/^Updated/.test(await page.textContent('#status')), `status: ${await page.textContent('#status')}`);
    assert(sent.includes(API + '/v1/attention') && !sent.some((u) => u.includes('/v1/v1')),
      `sent: ${sent.join(', ')}`);
  } finally {
    await pointAt('');
  }
});

/* types text into a number input the way a learner does, key by key */
async function typeInto(sel, text) {
  await page.fill(sel, '');
  await page.type(sel, text);
}
const marked = (sel) => page.getAttribute(sel, 'aria-invalid');
/* box names field what at pointer ptr, and the field sel is marked */
async function named(box, ptr, what, sel) {
  const err = await shown(box);
  assert(err.includes(`(at ${ptr}: ${what}, marked in red)`), `${ptr}: ${box} reads: ${err}`);
  assert((await marked(sel)) === 'true', `${ptr}: ${sel} is not marked`);
}
async function noSeriousViolation(what) {
  const r = await page.evaluate(async () => window.axe.run(document, { resultTypes: ['violations'] }));
  const bad = r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert(bad.length === 0, `${what}: ${bad.map((v) => `${v.id}: ${v.nodes.map((n) => n.target).join(' ')}`).join('; ')}`);
}

await step('?api= with a stray % is taken as typed, not left "Loading…"', async () => {
  const other = await browser.newPage();
  const own = [];
  other.on('pageerror', (e) => own.push(String(e)));
  try {
    const url = new URL(PAGE);
    url.search = '?api=' + API + '/100%';       /* "%" not followed by two hex digits */
    await other.goto(url.href);
    await other.waitForFunction(() => Number(document.body.dataset.updates || 0) > 0 &&
      document.body.dataset.busy === '0', null, { timeout: 10000 });
    assert((await other.inputValue('#api-base')) === API + '/100%', `field: ${await other.inputValue('#api-base')}`);
    assert(!/Loading/.test(await other.textContent('#status')), `status: ${await other.textContent('#status')}`);
    assert(own.length === 0, own.join(' | '));
  } finally {
    await other.close();
  }
});

await step('attnd refusing an option marks its field, names it, and the mark goes once it takes it', async () => {
  for (const [check, sel, bad, good, ptr, what] of [
    ['#use-scale', '#scale', '0', '2', '/scale', 'the custom scale'],
    ['#use-rope', '#rope-base', '0', '10000', '/rope/base', 'the RoPE base']]) {
    await andWait(() => page.check(check));
    await andWait(() => typeInto(sel, bad));
    assert(/^attnd answered 422/.test(await shown('#error')), `${ptr}: ${await shown('#error')}`);
    await named('#error', ptr, what, sel);
    await andWait(() => typeInto(sel, good));
    assert((await shown('#error')) === '', `${ptr}: error box after the fix: ${await shown('#error')}`);
    assert((await marked(sel)) === null, `${ptr}: ${sel} still marked after attnd took ${good}`);
    if (ptr === '/rope/base') {               /* RoPE over an odd d_k: /rope names the switch */
      await andWait(() => page.click('#dk-add'));
      await named('#error', '/rope', 'RoPE', '#use-rope');
      await andWait(() => page.click('#dk-del'));
      assert((await marked('#use-rope')) === null, 'the RoPE switch still marked at d_k 2');
    }
    await andWait(() => page.uncheck(check));
  }
});

await step('every other option pointer marks its field too (answers made by the test)', async () => {
  await page.addScriptTag({ path: join(HERE, 'node_modules', 'axe-core', 'axe.min.js') });
  for (const [ptr, what, sel] of [['/sink_logit', 'the sink logit', '#sink-logit'],
    ['/softmax', 'the softmax', '#softmax-box'], ['/causal', 'the causal mask', '#causal'],
    ['/rope/pairs', 'the RoPE pairs', '#rope-pairs']]) {
    /* the Results' request (only it sends a V bias) refused at ptr */
    await page.route('**/v1/attention', (route) => {
      const b = JSON.parse(route.request().postData() || '{}');
      if (!(b.bias && b.bias.v)) return route.continue();
      return route.fulfill({ status: 422, contentType: 'application/json',
        body: JSON.stringify({ error: { code: 'invalid_field', message: 'made by the test', path: ptr } }) });
    });
    try {
      await andWait(() => page.check('#use-bv'));
    } finally {
      await page.unroute('**/v1/attention');
    }
    await named('#error', ptr, what, sel);
    await noSeriousViolation(`${sel} marked`);
    await andWait(() => page.uncheck('#use-bv'));
    assert((await marked(sel)) === null, `${ptr}: ${sel} still marked after attnd took the request`);
  }
});

await step('a refused session start marks the option field in the decode section', async () => {
  await page.route('**/v1/sessions', (route) => route.fulfill({ status: 422, contentType: 'application/json',
    body: '{"error":{"code":"invalid_field","message":"made by the test","path":"/sink_logit"}}' }));
  try {
    await page.click('#sess-start');
    await page.waitForFunction(() => !document.getElementById('sess-error').hidden, null, { timeout: 10000 });
  } finally {
    await page.unroute('**/v1/sessions');
  }
  await named('#sess-error', '/sink_logit', 'the sink logit', '#sink-logit');
  /* the learner edits the inputs: the refusal spoke of the old ones */
  const cell = '#grid-q input[data-r="0"][data-c="0"]';
  await page.fill(cell, await page.inputValue(cell));   /* an edit that keeps the example */
  await page.waitForFunction(() => document.getElementById('sess-error').hidden, null, { timeout: 5000 })
    .catch(() => {});
  assert((await shown('#sess-error')) === '', `still shown after an edit: ${await shown('#sess-error')}`);
  await page.click('#sess-start');
  await page.waitForFunction(() => !document.getElementById('sess-end').disabled, null, { timeout: 10000 });
  assert((await marked('#sink-logit')) === null, 'the sink logit still marked after attnd took the session');
  await page.click('#sess-end');
});

/* Starts a session on the attnd the page points at and appends one
 * token; its id. */
async function startWithOneToken() {
  await page.click('#sess-start');
  await page.waitForFunction(() => !document.getElementById('sess-end').disabled, null, { timeout: 10000 });
  const id = (await page.textContent('#sess-info')).match(/^Session (\S+) started/)[1];
  await page.click('#step');
  await page.waitForFunction(() => document.body.dataset.steps === '1' ||
    !document.getElementById('sess-error').hidden, null, { timeout: 10000 });
  assert((await shown('#sess-error')) === '', `step: ${await shown('#sess-error')}`);
  return id;
}
const kvStatus = async (base, id) => (await fetch(`${base}/v1/sessions/${id}/kv`)).status;
const isOpen = async () => !(await page.$eval('#sess-end', (b) => b.disabled));
/* the decode section once the server changed: session id ended and said
 * so, its info line matching re */
async function ended(id, re) {
  await page.waitForFunction((r) => new RegExp(r).test(document.getElementById('sess-info').textContent),
    re.source, { timeout: 5000 }).catch(() => {});
  const info = await page.textContent('#sess-info');
  const status = await page.textContent('#sess-status');
  assert(!(await isOpen()) && await page.$eval('#step-box', (b) => b.disabled), `session ${id} still open: ${info}`);
  assert(status.includes(`Session ${id} ended: the API base URL or key changed`), `status: ${status}`);
  assert(re.test(info), `info: ${info}`);
}

await step('changing the API base URL ends the open decode session on the attnd that started it', async () => {
  const id = await startWithOneToken();
  try {
    await pointAt(OTHER);
    await ended(id, /deleted on the attnd it was started on/);
    assert((await kvStatus(API, id)) === 404, `session ${id} still held by the first attnd`);
    const id2 = await startWithOneToken();      /* the next session lives on the other attnd */
    assert((await kvStatus(OTHER, id2)) === 200, `session ${id2} not on the other attnd`);
    /* the other attnd cannot be reached for the DELETE: forgotten, and said */
    await page.route('**/v1/sessions/*', (route) => (route.request().method() === 'DELETE'
      ? route.abort() : route.continue()));
    try {
      await pointAt('');
      await ended(id2, /forgotten: the attnd it was started on did not delete it/);
    } finally {
      await page.unroute('**/v1/sessions/*');
    }
    await fetch(`${OTHER}/v1/sessions/${id2}`, { method: 'DELETE' });
  } finally {
    if (await page.inputValue('#api-base')) await pointAt('');
    if (await isOpen()) await page.click('#sess-end');
  }
});

await step('changing the API key ends the open session, deleted with the key it started with', async () => {
  const id = await startWithOneToken();
  const deletes = [];
  const seen = (r) => { if (r.method() === 'DELETE') deletes.push(r.headers().authorization || 'none'); };
  page.on('request', seen);
  try {
    await andWait(async () => { await page.fill('#api-key', 'a-new-key'); await page.press('#api-key', 'Tab'); });
    await ended(id, /deleted on the attnd it was started on/);
    assert((await kvStatus(API, id)) === 404, `session ${id} still held`);
    assert(deletes.join() === 'none', `DELETE sent with ${deletes.join()}`);
  } finally {
    page.off('request', seen);
    await andWait(async () => { await page.fill('#api-key', ''); await page.press('#api-key', 'Tab'); });
    if (await isOpen()) await page.click('#sess-end');
  }
});

await step('no uncaught script errors', async () => {
  assert(errors.length === 0, errors.join(' | '));
});

await browser.close();
finish();

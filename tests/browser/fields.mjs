// tests/browser/fields.mjs — the teaching page's own fields against what
// it sends, in real headless Chromium.
//
//   node fields.mjs --page URL --api URL
//
// An API base URL without http:// or https:// is refused before anything
// is sent (it would be a path on the page's own server), and one ending in
// /v1 is taken without it. Ends with "N passed, N failed".
import { chromium } from 'playwright-core';
import { andWait as waitRound, arg, assert, finish, step } from './steps.mjs';

const PAGE = arg('page');
const API = arg('api');

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

await step('no uncaught script errors', async () => {
  assert(errors.length === 0, errors.join(' | '));
});

await browser.close();
finish();

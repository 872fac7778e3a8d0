// tests/browser/steps.mjs — the few helpers every browser test shares: the
// command-line reader, named steps that count passes and failures, assert,
// close, and the closing line the test runner reads ("N passed, N failed").
/* --name VALUE from the command line, or dflt */
export function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : dflt;
}

let passed = 0;
let failed = 0;

export async function step(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.message ? e.message.split('\n').slice(0, 6).join(' | ') : e}`);
  }
}

export function assert(cond, msg) { if (!cond) throw new Error(msg); }

export function close(a, b, tol, what) {
  assert(Math.abs(a - b) <= tol, `${what}: ${a} vs ${b}`);
}

/* Print the summary line and exit 1 when a step failed. */
export function finish() {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

/* POST body as JSON to base + path; the parsed answer. */
export async function postJson(base, path, body) {
  const r = await fetch(base + path, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body) });
  return r.json();
}

/* Run action on the teaching page, then wait for its next update round
 * (app.js counts them in body[data-updates]) to finish. */
export async function andWait(page, action) {
  const before = await page.evaluate(() => Number(document.body.dataset.updates || 0));
  await action();
  await page.waitForFunction((n) => Number(document.body.dataset.updates || 0) > n &&
    document.body.dataset.busy === '0', before, { timeout: 20000 });
}

// tests/browser/openapi.mjs — checks server/web/openapi.json.
//
//   node openapi.mjs DOC                 validate the document only
//   node openapi.mjs DOC http://HOST:PORT  ... and run its examples live
//
// 1. The document is validated against the OpenAPI 3.1 schema by
//    @seriousme/openapi-schema-validator (a real validator from npm).
// 2. Every JSON request and response example is validated with Ajv
//    (JSON Schema 2020-12, the dialect of OpenAPI 3.1) against the schema
//    it is documented under, so schemas and examples cannot drift apart.
//    Every path documents OPTIONS (the CORS preflight), every GET path HEAD,
//    and every operation the shared 500 (Internal, or V2Internal under /v2).
// 3. With a server URL, every response example is sent to the running attnd
//    (the request example of the same name is the body; x-attnd-before sets
//    up sessions) and the answer must have the documented status, satisfy
//    the documented schema, and contain the example's values (numbers to
//    1e-9 relative; x-attnd-ignore lists varying members).
// Prints one line per check and ends with "N passed, N failed".
import { readFileSync } from 'node:fs';
import { Validator } from '@seriousme/openapi-schema-validator';
import Ajv2020 from 'ajv/dist/2020.js';

const [docPath, base] = process.argv.slice(2);
if (!docPath) {
  console.error('usage: node openapi.mjs DOC [BASE_URL]');
  process.exit(2);
}
const doc = JSON.parse(readFileSync(docPath, 'utf8'));
let passed = 0;
let failed = 0;

function ok(name) { passed++; console.log(`ok   ${name}`); }
function fail(name, why) { failed++; console.log(`FAIL ${name}: ${why}`); }

// ---- JSON pointers -------------------------------------------------------
const esc = (s) => String(s).replace(/~/g, '~0').replace(/\//g, '~1');

function getPtr(obj, ptr) {
  if (ptr === '') return obj;
  return ptr.split('/').slice(1).reduce((o, k) => (o == null ? undefined : o[k.replace(/~1/g, '/').replace(/~0/g, '~')]), obj);
}

// ---- 1. the document itself -----------------------------------------------
const validator = new Validator();
const res = await validator.validate(doc);
if (res.valid && validator.version === '3.1') ok('document is valid OpenAPI 3.1');
else fail('document is valid OpenAPI 3.1', JSON.stringify(res.errors).slice(0, 2000));

// ---- 2. examples against their schemas ------------------------------------
const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
ajv.addSchema(doc, 'openapi.json');
const compiled = new Map();
function schemaAt(ptr) {
  if (!compiled.has(ptr)) compiled.set(ptr, ajv.compile({ $ref: 'openapi.json#' + ptr }));
  return compiled.get(ptr);
}

// Every operation: {path, method, op, ptr}.
const METHODS = ['get', 'head', 'post', 'put', 'delete', 'patch', 'options'];
const operations = [];
for (const [path, item] of Object.entries(doc.paths)) {
  for (const method of METHODS) {
    if (item[method]) operations.push({ path, method, op: item[method], ptr: `/paths/${esc(path)}/${method}` });
  }
}

function deref(obj) {
  while (obj && obj.$ref) obj = getPtr(doc, obj.$ref.slice(1));
  return obj;
}

// Resolved responses keep the pointer of where their schema lives.
function responsesOf(o) {
  const out = [];
  for (const [status, r0] of Object.entries(o.op.responses || {})) {
    const ptr = r0.$ref ? r0.$ref.slice(1) : `${o.ptr}/responses/${status}`;
    out.push({ status, resp: deref(r0), ptr });
  }
  return out;
}

let exampleCount = 0;
for (const o of operations) {
  const name = `${o.method.toUpperCase()} ${o.path}`;
  const rb = o.op.requestBody && o.op.requestBody.content && o.op.requestBody.content['application/json'];
  for (const [ex, e] of Object.entries((rb && rb.examples) || {})) {
    exampleCount++;
    if (e['x-attnd-raw']) continue;
    const v = schemaAt(`${o.ptr}/requestBody/content/application~1json/schema`);
    const fits = v(e.value);
    if (e['x-attnd-invalid']) {
      if (!fits) ok(`${name} request example "${ex}" is refused by its schema`);
      else fail(`${name} request example "${ex}" is refused by its schema`, 'schema accepts it');
    } else if (fits) ok(`${name} request example "${ex}" fits its schema`);
    else fail(`${name} request example "${ex}" fits its schema`, ajv.errorsText(v.errors));
  }
  for (const { status, resp, ptr } of responsesOf(o)) {
    const mt = resp.content && resp.content['application/json'];
    for (const [ex, e] of Object.entries((mt && mt.examples) || {})) {
      exampleCount++;
      const v = schemaAt(`${ptr}/content/application~1json/schema`);
      if (v(e.value)) ok(`${name} ${status} example "${ex}" fits its schema`);
      else fail(`${name} ${status} example "${ex}" fits its schema`, ajv.errorsText(v.errors));
    }
  }
}
if (exampleCount >= 20) ok(`document carries ${exampleCount} examples`);
else fail('document carries examples', `only ${exampleCount}`);

// Every route the server serves is documented.
const ROUTES = [
  'post /v1/attention', 'post /v1/sessions', 'get /v1/sessions/{id}', 'delete /v1/sessions/{id}',
  'post /v1/sessions/{id}/kv', 'get /v1/sessions/{id}/kv', 'post /v1/sessions/{id}/attention',
  'post /v1/sessions/{id}/truncate', 'post /v1/sessions/{id}/fork', 'get /v1/verify', 'post /v1/verify',
  'get /verify', 'post /verify', 'get /healthz', 'get /readyz', 'get /metrics', 'get /v1/info',
  'get /v1/openapi.json', 'get /', 'get /v2', 'get /v2/health/live', 'get /v2/health/ready',
  'get /v2/models/attention', 'get /v2/models/attention/ready', 'post /v2/models/attention/infer',
];
const have = new Set(operations.map((o) => `${o.method} ${o.path}`));
const missing = ROUTES.filter((r) => !have.has(r));
if (missing.length === 0) ok(`all ${ROUTES.length} documented routes are documented`);
else fail('all documented routes are documented', missing.join(', '));

// HEAD beside every GET, OPTIONS on every path, the shared 500 everywhere
{
  const lack = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    if (item.get && !item.head) lack.push(`head ${path}`);
    if (!item.options) lack.push(`options ${path}`);
    else if (!(item.options.responses['204'] || {}).$ref) lack.push(`options ${path}: 204`);
  }
  if (lack.length === 0) ok('every path documents OPTIONS, and HEAD beside GET');
  else fail('every path documents OPTIONS, and HEAD beside GET', lack.join(', '));
  const no500 = operations.filter((o) => {
    const want = `#/components/responses/${o.path.startsWith('/v2') ? 'V2Internal' : 'Internal'}`;
    return (o.op.responses['500'] || {}).$ref !== want;
  }).map((o) => `${o.method} ${o.path}`);
  if (no500.length === 0) ok(`every operation (${operations.length}) documents the shared 500`);
  else fail('every operation documents the shared 500', no500.join(', '));
}

// the server's codes are its error table's (api/error.h, one X(...) a code)
const codes = getPtr(doc, '/components/schemas/ErrorCode/enum') || [];
const table = readFileSync(new URL('../../api/error.h', import.meta.url), 'utf8');
const wanted = [...table.matchAll(/X\(\w+,\s*"([a-z_]+)",\s*\d{3}/g)].map((m) => m[1]);
const lost = wanted.filter((c) => !codes.includes(c));
if (wanted.length > 20 && lost.length === 0) {
  ok(`every error code the server knows (${wanted.length}) is in ErrorCode`);
} else {
  fail('every error code the server knows is in ErrorCode', `${wanted.length} in api/error.h; `
       + `missing: ${lost.join(', ')}`);
}

// ---- 3. the examples against a running attnd ------------------------------
// Does `actual` contain `expected`? Returns null or a description of the
// first difference.
// An ignore pointer may use "*" for any one segment.
function ignored(ptr, ignore) {
  const segs = ptr.split('/');
  return ignore.some((p) => {
    const ps = p.split('/');
    return ps.length === segs.length && ps.every((x, i) => x === '*' || x === segs[i]);
  });
}

function contains(expected, actual, ptr, ignore, partial) {
  if (ignored(ptr, ignore)) return null;
  if (typeof expected === 'number') {
    if (typeof actual !== 'number') return `${ptr}: expected ${expected}, got ${JSON.stringify(actual)}`;
    return Math.abs(expected - actual) <= 1e-9 * Math.max(1, Math.abs(expected)) ? null
      : `${ptr}: expected ${expected}, got ${actual}`;
  }
  if (expected === '…') return typeof actual === 'string' ? null : `${ptr}: expected a string`;
  if (expected === null || typeof expected !== 'object') {
    return expected === actual ? null : `${ptr}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`;
  }
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual)) return `${ptr}: expected an array, got ${JSON.stringify(actual)}`;
    if (partial) {
      for (const [i, e] of expected.entries()) {
        if (!actual.some((a, j) => contains(e, a, `${ptr}/${j}`, ignore, partial) === null)) {
          return `${ptr}/${i}: no item of the answer matches ${JSON.stringify(e).slice(0, 200)}`;
        }
      }
      return null;
    }
    if (expected.length !== actual.length) return `${ptr}: expected ${expected.length} items, got ${actual.length}`;
    for (let i = 0; i < expected.length; i++) {
      const d = contains(expected[i], actual[i], `${ptr}/${i}`, ignore, partial);
      if (d) return d;
    }
    return null;
  }
  if (actual === null || typeof actual !== 'object' || Array.isArray(actual)) {
    return `${ptr}: expected an object, got ${JSON.stringify(actual)}`;
  }
  for (const k of Object.keys(expected)) {
    if (ignored(`${ptr}/${esc(k)}`, ignore)) continue;
    if (!(k in actual)) return `${ptr}/${esc(k)}: missing`;
    const d = contains(expected[k], actual[k], `${ptr}/${esc(k)}`, ignore, partial);
    if (d) return d;
  }
  return null;
}

function fill(template, vars) {
  return template.replace(/\{(\w+)\}/g, (m, k) => (k in vars ? encodeURIComponent(vars[k]) : m));
}

async function send(method, path, body, headers = {}) {
  const init = { method: method.toUpperCase(), headers: { ...headers } };
  if (body !== undefined && !['GET', 'HEAD'].includes(init.method)) {
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
    if (!Object.keys(init.headers).some((h) => h.toLowerCase() === 'content-type')) {
      init.headers['Content-Type'] = 'application/json';
    }
  }
  const r = await fetch(base + path, init);
  const text = await r.text();
  let json;
  try { json = text ? JSON.parse(text) : undefined; } catch { json = undefined; }
  return { status: r.status, text, json, headers: r.headers };
}

async function runBefore(steps, vars) {
  for (const s of steps || []) {
    const r = await send(s.method, fill(s.path, vars), s.body);
    if (s.status && r.status !== s.status) {
      throw new Error(`setup ${s.method} ${fill(s.path, vars)} answered ${r.status}: ${r.text.slice(0, 300)}`);
    }
    for (const [k, p] of Object.entries(s.save || {})) vars[k] = getPtr(r.json, p);
  }
}

async function runExample(o, status, resp, ptr, ct, exName, ex) {
  const label = `live ${o.method.toUpperCase()} ${o.path} -> ${status} "${exName}"`;
  if (ex['x-attnd-untested']) { console.log(`skip ${label}: ${ex['x-attnd-untested']}`); return; }
  const reqExamples = (o.op.requestBody && o.op.requestBody.content &&
    o.op.requestBody.content['application/json'] && o.op.requestBody.content['application/json'].examples) || {};
  const req = reqExamples[exName];
  let body;
  if (req) body = req.value;
  else if (o.op.requestBody && o.op.requestBody.required) body = Object.values(reqExamples)[0].value;
  const vars = { ...(ex['x-attnd-vars'] || {}), ...((req && req['x-attnd-vars']) || {}) };
  try {
    await runBefore([...((req && req['x-attnd-before']) || []), ...(ex['x-attnd-before'] || [])], vars);
    const r = await send(ex['x-attnd-method'] || o.method, fill(o.path, vars), body,
      { ...((req && req['x-attnd-headers']) || {}) });
    if (String(r.status) !== status) {
      fail(label, `status ${r.status}, body ${r.text.slice(0, 300)}`);
      return;
    }
    for (const [h, re] of Object.entries(ex['x-attnd-expect-headers'] || {})) {
      const got = r.headers.get(h);
      if (got === null || !new RegExp(re).test(got)) { fail(label, `header ${h}: ${got} does not match ${re}`); return; }
    }
    if (ct === 'application/json') {
      const v = schemaAt(`${ptr}/content/application~1json/schema`);
      if (!v(r.json)) { fail(label, `answer does not fit the schema: ${ajv.errorsText(v.errors)}; ${r.text.slice(0, 300)}`); return; }
      const d = contains(ex.value, r.json, '', ex['x-attnd-ignore'] || [], !!ex['x-attnd-partial-arrays']);
      if (d) { fail(label, `${d}; answer ${r.text.slice(0, 400)}`); return; }
    } else if (ct) {
      const lost = (ex['x-attnd-contains'] || []).filter((s) => !r.text.includes(s));
      if (lost.length) { fail(label, `text lacks ${JSON.stringify(lost)}`); return; }
    }
    ok(label);
  } catch (e) {
    fail(label, e.message);
  }
}

if (base) {
  for (const o of operations) {
    for (const { status, resp, ptr } of responsesOf(o)) {
      if (resp['x-attnd-example']) await runExample(o, status, resp, ptr, null, 'setup', resp['x-attnd-example']);
      for (const [ct, mt] of Object.entries(resp.content || {})) {
        for (const [exName, ex] of Object.entries(mt.examples || {})) {
          await runExample(o, status, resp, ptr, ct, exName, ex);
        }
      }
    }
  }
  // The served document is this document.
  try {
    const r = await send('get', '/v1/openapi.json');
    const same = r.status === 200 && JSON.stringify(r.json) === JSON.stringify(doc);
    if (same) ok('GET /v1/openapi.json serves this document');
    else fail('GET /v1/openapi.json serves this document', `status ${r.status}`);
  } catch (e) {
    fail('GET /v1/openapi.json serves this document', e.message);
  }
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);

// tests/browser/responses.mjs — every response the e2e suite received
// against the OpenAPI document.
//
//   node responses.mjs DOC RECORDS
//
// RECORDS is the JSON-lines file tests/e2e/attnd_proc.py writes (method,
// path, status, content type, body). Each response to a documented route
// must have a documented status and content type, and a JSON body (or the
// JSON part of a binary v2 answer, Inference-Header-Content-Length bytes)
// must satisfy the schema documented for that status, with Ajv (JSON Schema
// 2020-12, the dialect of OpenAPI 3.1). Paths that match no documented
// route (404 probes of the router) are counted and left alone. One check
// per (method, route, status); ends with "N passed, N failed".
import { readFileSync } from 'node:fs';
import Ajv2020 from 'ajv/dist/2020.js';

const [docPath, recPath] = process.argv.slice(2);
if (!docPath || !recPath) {
  console.error('usage: node responses.mjs DOC RECORDS');
  process.exit(2);
}
const doc = JSON.parse(readFileSync(docPath, 'utf8'));
const records = readFileSync(recPath, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
ajv.addSchema(doc, 'openapi.json');
const compiled = new Map();
const esc = (s) => String(s).replace(/~/g, '~0').replace(/\//g, '~1');
function validatorAt(ptr) {
  if (!compiled.has(ptr)) compiled.set(ptr, ajv.compile({ $ref: 'openapi.json#' + ptr }));
  return compiled.get(ptr);
}
function resolve(obj) {
  while (obj && obj.$ref) {
    obj = obj.$ref.slice(2).split('/').reduce((o, k) => o[k.replace(/~1/g, '/').replace(/~0/g, '~')], doc);
  }
  return obj;
}
function refPtr(obj, ptr) {          // follow $ref chains, keeping a pointer
  while (obj && obj.$ref) { ptr = obj.$ref.slice(1); obj = resolve(obj); }
  return [obj, ptr];
}

// Documented paths as regular expressions ({x} is one segment).
const routes = Object.keys(doc.paths).map((t) => ({
  template: t,
  re: new RegExp('^' + t.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+') + '$'),
  literal: !t.includes('{'),
}));
function route(path) {            // a literal template wins over a pattern
  const hits = routes.filter((r) => r.re.test(path));
  return hits.find((r) => r.literal) || hits[0];
}

// Statuses the transport answers before the request reaches a route.
const TRANSPORT_REFUSALS = [413, 429, 503];
function firstDocumenting(status) {  // [template, method] of the first op with status
  for (const [t, ops] of Object.entries(doc.paths))
    for (const [mm, op] of Object.entries(ops))
      if (op && op.responses && op.responses[status]) return [t, mm];
  return null;
}

const results = new Map();        // "METHOD template status" -> [count, failures[]]
let unmatched = 0;
function note(key, why) {
  if (!results.has(key)) results.set(key, [0, []]);
  const r = results.get(key);
  r[0]++;
  if (why && r[1].length < 3) r[1].push(why);
}

for (const rec of records) {
  let method = rec.method.toLowerCase();
  if (method === 'options') continue;        // CORS preflights: no body to check
  const rt = route(rec.path);
  if (!rt) { unmatched++; continue; }
  if (method === 'head' && !doc.paths[rt.template].head) method = 'get';
  const key = `${rec.method} ${rt.template} ${rec.status}`;
  let m = method;
  let tpl = rt.template;
  // 405 answers a method the route does not have: it is documented under
  // the route's own operations.
  if (!doc.paths[tpl][m] && rec.status === 405)
    m = ['get', 'post', 'delete'].find((x) => doc.paths[tpl][x]);
  // The transport's refusals come before a request is routed, whatever its
  // method (a body over the cap, a rate limit, the body budget): one to a
  // method the route does not have is checked against the first operation
  // that documents that refusal.
  if (!doc.paths[tpl][m] && TRANSPORT_REFUSALS.includes(rec.status))
    [tpl, m] = firstDocumenting(String(rec.status)) || [tpl, m];
  const op = doc.paths[tpl][m];
  if (!op) { note(key, `method not documented`); continue; }
  const base = `#/paths/${esc(tpl)}/${m}/responses`;
  let [resp, ptr] = refPtr(op.responses[String(rec.status)], `${base.slice(1)}/${rec.status}`);
  if (!resp) [resp, ptr] = refPtr(op.responses.default, `${base.slice(1)}/default`);
  if (!resp) { note(key, `status ${rec.status} not documented`); continue; }
  const content = resp.content || {};
  if (rec.body === null || rec.body === '' || rec.method === 'HEAD') {
    if (rec.body === '' && Object.keys(content).length && rec.status !== 204)
      note(key, 'empty body, content documented');
    else note(key);
    continue;
  }
  const ct = (rec.content_type || '').split(';')[0].trim();
  if (!content[ct]) { note(key, `content type ${ct} not documented (${Object.keys(content)})`); continue; }
  let text = rec.body;
  let media = ct;
  if (ct === 'application/octet-stream' && rec.header_length) {
    text = Buffer.from(rec.body, 'latin1').subarray(0, Number(rec.header_length)).toString('utf8');
    media = 'application/json';           // the JSON part, as the JSON answer
    if (!content[media] && !(content[ct] && content[ct]['x-attnd-json-part'])) {
      note(key, 'binary answer without a documented JSON part'); continue;
    }
  } else if (ct !== 'application/json') { note(key); continue; }
  let body;
  try { body = JSON.parse(Buffer.from(text, 'latin1').toString('utf8')); } catch (e) { note(key, 'body is not JSON'); continue; }
  const mediaObj = content[media] || content[ct];
  const schemaPtr = content[media] ? `${ptr}/content/${esc(media)}/schema` : `${ptr}/content/${esc(ct)}/x-attnd-json-part`;
  if (!mediaObj.schema && !mediaObj['x-attnd-json-part']) { note(key); continue; }
  const v = validatorAt(schemaPtr);
  if (v(body)) note(key);
  else note(key, `${ajv.errorsText(v.errors, { separator: '; ' }).slice(0, 400)} in ${JSON.stringify(body).slice(0, 200)}`);
}

let passed = 0;
let failed = 0;
for (const [key, [count, fails]] of [...results].sort()) {
  if (fails.length) { failed++; console.log(`FAIL ${key} (${count} responses): ${fails.join(' | ')}`); }
  else { passed++; console.log(`ok   ${key} (${count} responses)`); }
}
console.log(`${records.length} responses, ${unmatched} to undocumented paths`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);

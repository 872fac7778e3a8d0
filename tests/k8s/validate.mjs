// tests/k8s/validate.mjs — checks a Kubernetes manifest (default
// docker/k8s.yaml) against the API schemas of kubernetes-models (each
// object's validate(), generated from the Kubernetes OpenAPI document), then
// what attnd's deployment needs: probes on every container, the StatefulSet's
// headless Service, a volume claim at ATTND_STATE_DIR, ATTND_REPLICA_ID from
// the pod name, disruption budgets that select pods, the nginx ConfigMap
// equal to docker/nginx.conf and every placeholder of it set, nginx's routing
// values naming the StatefulSet's pods and nothing else, every pod
// within the "restricted" Pod Security Standard (its namespace enforcing
// it), and a NetworkPolicy that lets only the nginx pods reach attnd's.
// Prints one line per problem and "N passed, N failed".
//
//   node tests/k8s/validate.mjs [manifest.yaml] [nginx.conf]
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { Namespace } from "kubernetes-models/v1/Namespace";
import { Service } from "kubernetes-models/v1/Service";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { StatefulSet } from "kubernetes-models/apps/v1/StatefulSet";
import { Deployment } from "kubernetes-models/apps/v1/Deployment";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1/PodDisruptionBudget";
import { NetworkPolicy } from "kubernetes-models/networking.k8s.io/v1/NetworkPolicy";

const here = new URL("../../docker/", import.meta.url);
const manifest = process.argv[2] ?? new URL("k8s.yaml", here);
const confPath = process.argv[3] ?? new URL("nginx.conf", here);
const MODELS = {
  "v1/Namespace": Namespace, "v1/Service": Service, "v1/ConfigMap": ConfigMap,
  "apps/v1/StatefulSet": StatefulSet, "apps/v1/Deployment": Deployment,
  "policy/v1/PodDisruptionBudget": PodDisruptionBudget,
  "networking.k8s.io/v1/NetworkPolicy": NetworkPolicy,
};

let passed = 0, failed = 0;
function check(ok, what) {
  if (ok) passed++;
  else { failed++; console.log("FAIL " + what); }
}

const docs = parseAllDocuments(readFileSync(manifest, "utf8"));
const objs = [];
for (const d of docs) {
  check(d.errors.length === 0, `YAML: ${d.errors.map(String).join("; ")}`);
  const o = d.toJS();
  if (!o) continue;
  objs.push(o);
  const key = `${o.apiVersion}/${o.kind}`;
  const Model = MODELS[key];
  check(Model !== undefined, `${key} ${o.metadata?.name}: no schema here for this kind`);
  if (!Model) continue;
  try {
    new Model(o).validate();
    passed++;
  } catch (e) {
    check(false, `${key} ${o.metadata?.name}: ${e.message}`);
  }
}

const byKind = (k) => objs.filter((o) => o.kind === k);
const labelsMatch = (sel, labels) =>
  Object.entries(sel ?? {}).every(([k, v]) => labels?.[k] === v);
const workloads = [...byKind("StatefulSet"), ...byKind("Deployment")];

for (const w of workloads) {
  const pod = w.spec.template;
  check(labelsMatch(w.spec.selector.matchLabels, pod.metadata.labels),
        `${w.metadata.name}: selector does not match its pods`);
  for (const c of pod.spec.containers) {
    check(c.livenessProbe && c.readinessProbe, `${w.metadata.name}/${c.name}: probes missing`);
  }
  check(byKind("PodDisruptionBudget").some((p) =>
          labelsMatch(p.spec.selector.matchLabels, pod.metadata.labels)),
        `${w.metadata.name}: no PodDisruptionBudget selects its pods`);
  // the "restricted" Pod Security Standard (what a namespace labelled
  // pod-security.kubernetes.io/enforce=restricted admits)
  const psc = pod.spec.securityContext ?? {};
  for (const c of [...(pod.spec.initContainers ?? []), ...pod.spec.containers]) {
    const csc = c.securityContext ?? {};
    const where = `${w.metadata.name}/${c.name}: restricted profile:`;
    check((csc.runAsNonRoot ?? psc.runAsNonRoot) === true, `${where} runAsNonRoot`);
    check((csc.runAsUser ?? psc.runAsUser ?? 1) !== 0, `${where} runAsUser is not 0`);
    check(csc.allowPrivilegeEscalation === false, `${where} allowPrivilegeEscalation false`);
    const drop = csc.capabilities?.drop ?? [];
    check(drop.includes("ALL"), `${where} capabilities drop ALL`);
    check((csc.capabilities?.add ?? []).every((a) => a === "NET_BIND_SERVICE"),
          `${where} no capability added but NET_BIND_SERVICE`);
    const sp = (csc.seccompProfile ?? psc.seccompProfile)?.type;
    check(sp === "RuntimeDefault" || sp === "Localhost", `${where} seccompProfile RuntimeDefault`);
    check(csc.privileged !== true, `${where} not privileged`);
    check(csc.readOnlyRootFilesystem === true, `${where} readOnlyRootFilesystem`);
  }
  check(!pod.spec.hostNetwork && !pod.spec.hostPID && !pod.spec.hostIPC &&
        (pod.spec.volumes ?? []).every((v) => !v.hostPath),
        `${w.metadata.name}: restricted profile: no host namespaces or hostPath`);
  const ns = byKind("Namespace").find((n) => n.metadata.name === w.metadata.namespace);
  check(ns?.metadata.labels?.["pod-security.kubernetes.io/enforce"] === "restricted",
        `${w.metadata.name}: its Namespace enforces the restricted Pod Security Standard`);
}

const sts = byKind("StatefulSet");
check(sts.length === 1, "one StatefulSet of attnd replicas");
for (const s of sts) {
  const svc = byKind("Service").find((x) => x.metadata.name === s.spec.serviceName);
  check(svc && svc.spec.clusterIP === "None", `${s.metadata.name}: serviceName is not a headless Service`);
  check(svc && labelsMatch(svc.spec.selector, s.spec.template.metadata.labels),
        `${s.metadata.name}: its headless Service does not select its pods`);
  const c = s.spec.template.spec.containers[0];
  const env = Object.fromEntries(c.env.map((e) => [e.name, e]));
  check(env.ATTND_REPLICA_ID?.valueFrom?.fieldRef?.fieldPath === "metadata.name",
        "ATTND_REPLICA_ID comes from the pod name");
  const dir = env.ATTND_STATE_DIR?.value;
  const mount = c.volumeMounts.find((m) => m.mountPath === dir);
  check(mount && (s.spec.volumeClaimTemplates ?? []).some((v) => v.metadata.name === mount.name),
        "ATTND_STATE_DIR is a volume claimed per pod");
  check(["always", "everysec", "no"].includes(env.ATTND_FSYNC?.value), "ATTND_FSYNC is set");
  // every connection comes from nginx: a per-address cap below the total
  // takes the replica out of rotation under load (docker/nginx.conf, Limits)
  check(Number(env.ATTND_MAX_CONNECTIONS_PER_IP?.value ?? 256) >=
        Number(env.ATTND_MAX_CONNECTIONS?.value ?? 1000),
        "ATTND_MAX_CONNECTIONS_PER_IP is at least ATTND_MAX_CONNECTIONS");
}

// attnd runs without API keys here: only nginx may reach its pods
{
  const pods = sts[0]?.spec.template.metadata.labels;
  const ngPods = byKind("Deployment").find((d) => d.metadata.name === "attnd-nginx")
    ?.spec.template.metadata.labels;
  const pols = byKind("NetworkPolicy").filter((p) => labelsMatch(p.spec.podSelector.matchLabels, pods));
  check(pols.length > 0, "a NetworkPolicy selects the attnd pods");
  for (const p of pols) {
    check((p.spec.policyTypes ?? ["Ingress"]).includes("Ingress"),
          `NetworkPolicy ${p.metadata.name}: restricts ingress`);
    for (const rule of p.spec.ingress ?? []) {
      check((rule.from ?? []).length > 0 && rule.from.every((f) => !f.ipBlock &&
              (f.podSelector ? Object.keys(f.podSelector.matchLabels ?? {}).length > 0 ||
                               (f.podSelector.matchExpressions ?? []).length > 0 : f.namespaceSelector)),
            `NetworkPolicy ${p.metadata.name}: every rule names the pods it admits`);
    }
    check((p.spec.ingress ?? []).some((r) => (r.from ?? []).some((f) =>
            f.podSelector && labelsMatch(f.podSelector.matchLabels, ngPods))),
          `NetworkPolicy ${p.metadata.name}: admits the nginx pods`);
  }
}

const conf = readFileSync(confPath, "utf8");
const cm = byKind("ConfigMap").find((x) => x.metadata.name === "attnd-nginx");
check(cm && cm.data["default.conf.template"] === conf,
      "ConfigMap attnd-nginx equals docker/nginx.conf (python3 docker/k8s_configmap.py)");
const ng = byKind("Deployment").find((d) =>
  d.spec.template.spec.volumes?.some((v) => v.configMap?.name === "attnd-nginx"));
check(ng !== undefined, "a Deployment mounts the nginx ConfigMap");
if (ng) {
  const env = new Set(ng.spec.template.spec.containers[0].env.map((e) => e.name));
  for (const [, name] of conf.matchAll(/\$\{(\w+)\}/g))
    check(env.has(name), `nginx Deployment sets the placeholder ${name}`);
  const mount = ng.spec.template.spec.containers[0].volumeMounts[0];
  check(mount.mountPath === "/etc/nginx/templates", "the template is where the image reads it");
}

// nginx makes a session's host from its id (docker/nginx.conf, Routing):
// the pattern must match the StatefulSet's pod names, as many as it scales
// to, and nothing else; the suffix and the pool are its headless Service
if (ng && sts.length === 1) {
  const s = sts[0];
  const val = Object.fromEntries(ng.spec.template.spec.containers[0].env.map((e) => [e.name, e.value]));
  const svc = byKind("Service").find((x) => x.metadata.name === s.spec.serviceName);
  const where = `${s.spec.serviceName}.${s.metadata.namespace}.svc.cluster.local:${svc?.spec.ports[0].port}`;
  check(val.ATTND_POOL === where, `ATTND_POOL is ${where} (the ready pods)`);
  // the pod's name is the id and begins its host name: nothing before it
  check(val.ATTND_HOST_PREFIX === "", "ATTND_HOST_PREFIX is set and empty");
  check(val.ATTND_HOST_SUFFIX === "." + where, `ATTND_HOST_SUFFIX is .${where}`);
  let re = null;
  try {
    re = new RegExp(`^(?:${val.ATTND_ID_RE})$`);
  } catch (e) {
    check(false, `ATTND_ID_RE: ${e.message}`);
  }
  const pod = (n) => `${s.metadata.name}-${n}`;
  check(re && [0, 1, s.spec.replicas - 1, s.spec.replicas, 99].every((n) => re.test(pod(n))),
        "ATTND_ID_RE matches the StatefulSet's pod names, beyond its replicas too");
  check(re && ["evil.example", `${pod(1)}.evil.example`, `${pod(1)}:80`, `${pod("x")}`,
               `${pod("01")}`, `x${pod(1)}`, "127.0.0.1", ""].every((x) => !re.test(x)),
        "ATTND_ID_RE matches nothing but pod names");
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);

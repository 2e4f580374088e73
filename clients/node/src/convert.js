// Between proto-loader's objects and the plain shapes of index.d.ts: timestamps as Date, string
// lists as arrays, tool sets as {only} or {allExcept}, JSON values as JSON, no synthetic oneof
// keys, and enum values accepted in their short form ('plan' for MODE_PLAN).

/** Drops the `_field: 'field'` keys proto-loader adds for proto3 `optional` fields. */
export function clean(obj) {
  if (obj == null) return obj;
  const out = {};
  for (const [k, v] of Object.entries(obj)) {
    if (k.startsWith('_') && v === k.slice(1)) continue;
    out[k] = v;
  }
  return out;
}

/** google.protobuf.Timestamp → Date (null when absent). */
export function toDate(ts) {
  if (ts == null) return null;
  return new Date(Number(ts.seconds) * 1000 + Math.floor(Number(ts.nanos) / 1e6));
}

/** google.protobuf.Duration → milliseconds (null when absent). */
export function toMillis(d) {
  if (d == null) return null;
  return Number(d.seconds) * 1000 + Number(d.nanos) / 1e6;
}

/** Milliseconds → google.protobuf.Duration. */
export function fromMillis(ms) {
  const total = Math.round(Number(ms) * 1e6); // nanoseconds
  const seconds = Math.floor(total / 1e9);
  return { seconds, nanos: total - seconds * 1e9 };
}

/** StringList → string[]; null when absent (absent and empty differ). */
export function stringList(list) {
  return list == null ? null : [...(list.values ?? [])];
}

/** google.protobuf.Value → a JSON value. */
export function plainValue(v) {
  if (v == null) return null;
  switch (v.kind) {
    case 'nullValue': return null;
    case 'numberValue': return v.numberValue;
    case 'stringValue': return v.stringValue;
    case 'boolValue': return v.boolValue;
    case 'structValue': return plainStruct(v.structValue);
    case 'listValue': return plainList(v.listValue);
    default: return null;
  }
}

/** google.protobuf.Struct → a JSON object. */
export function plainStruct(s) {
  return Object.fromEntries(Object.entries(s?.fields ?? {}).map(([k, x]) => [k, plainValue(x)]));
}

/** google.protobuf.ListValue → a JSON array. */
export function plainList(l) {
  return (l?.values ?? []).map(plainValue);
}

/** EffectiveTools (StringLists) or ToolSpec (ListValues) → {only: [...]} or {allExcept: [...]}. */
export function toolSet(t) {
  if (t == null || !t.kind) return null;
  const list = t[t.kind];
  const values = Array.isArray(list?.values) && list.values.every((x) => typeof x === 'string')
    ? [...list.values]
    : plainList(list);
  return t.kind === 'only' ? { only: values } : { allExcept: values };
}

/** An enum value from its full name ('MODE_PLAN') or short form ('plan', 'Plan'). */
export function enumValue(prefix, value) {
  if (value == null || value === '') return undefined;
  if (typeof value === 'number') return value;
  const s = String(value);
  return s.toUpperCase().startsWith(prefix) ? s.toUpperCase() : `${prefix}${s.toUpperCase()}`;
}

/** JSON text from a string (kept) or any other value (stringified). */
export function jsonText(value) {
  if (value == null) return undefined;
  return typeof value === 'string' ? value : JSON.stringify(value);
}

export function agent(a) {
  if (a == null) return null;
  return { ...clean(a), tools: stringList(a.tools), disallowedTools: stringList(a.disallowedTools) };
}

export function effective(e) {
  if (e == null) return null;
  return { ...clean(e), tools: toolSet(e.tools) };
}

function usage(u) {
  if (u == null) return null;
  return { ...clean(u), byModel: (u.byModel ?? []).map(clean) };
}

export function worker(w) {
  if (w == null) return null;
  return {
    ...clean(w),
    createTime: toDate(w.createTime),
    startTime: toDate(w.startTime),
    closeTime: toDate(w.closeTime),
    lastActivityTime: toDate(w.lastActivityTime),
    tools: toolSet(w.tools),
    usage: usage(w.usage),
    treeUsage: usage(w.treeUsage),
    worktree: w.worktree ? clean(w.worktree) : null,
  };
}

export function event(ev) {
  return {
    sequence: ev.sequence,
    state: ev.state,
    worker: worker(ev.worker),
    time: toDate(ev.time),
    progress: ev.progress ? clean(ev.progress) : null,
  };
}

export function diagnostic(d) {
  return clean(d);
}

export function command(c) {
  if (c == null) return null;
  return { ...clean(c), allowedTools: stringList(c.allowedTools) };
}

/** RunnerAssignment.spec → the JSON shape of the exec executor's stdin, in lowerCamelCase. */
export function spec(s) {
  const a = s.agent ?? {};
  const agentSpec = { ...clean(a), tools: toolSet(a.tools) };
  if (a.outputSchema != null) agentSpec.outputSchema = plainValue(a.outputSchema);
  else delete agentSpec.outputSchema;
  return { ...clean(s), agent: agentSpec };
}

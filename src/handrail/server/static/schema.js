// Checking a value against a JSON schema, and a line diff of two values: what the review page
// needs before it sends an edit (the server checks everything again). Our own code, no library.

export function resolve(schema, root) {
  let nullable = false;
  for (let i = 0; i < 32 && schema && typeof schema === "object"; i += 1) {
    if (typeof schema.$ref === "string" && schema.$ref.startsWith("#/")) {
      let target = root;
      for (const part of schema.$ref.slice(2).split("/")) target = target ? target[part] : undefined;
      const { $ref, ...rest } = schema;
      schema = { ...(target || {}), ...rest };
      continue;
    }
    const union = schema.anyOf || schema.oneOf;
    if (Array.isArray(union) && union.length === 2) {
      const real = union.filter((o) => !(o && o.type === "null"));
      if (real.length === 1) {
        nullable = true;
        const { anyOf, oneOf, ...rest } = schema;
        schema = { ...rest, ...real[0] };
        continue;
      }
    }
    if (Array.isArray(schema.type) && schema.type.includes("null") && schema.type.length === 2) {
      nullable = true;
      schema = { ...schema, type: schema.type.find((t) => t !== "null") };
    }
    return [schema, nullable];
  }
  return [{}, nullable];
}

function same(a, b) {
  return JSON.stringify(sorted(a)) === JSON.stringify(sorted(b));
}

function typeOk(type, value) {
  if (type === "string") return typeof value === "string";
  if (type === "number") return typeof value === "number" && Number.isFinite(value);
  if (type === "integer") return Number.isInteger(value);
  if (type === "boolean") return typeof value === "boolean";
  if (type === "object") return value !== null && typeof value === "object" && !Array.isArray(value);
  if (type === "array") return Array.isArray(value);
  if (type === "null") return value === null;
  return true;
}

export function check(schemaIn, value, root, path, errors) {
  const [schema, nullable] = resolve(schemaIn, root);
  const fail = (message) => errors.push({ path, message });
  if (value === null) {
    if (!nullable && schema.type && schema.type !== "null") fail("must not be null");
    return;
  }
  const union = schema.anyOf || schema.oneOf;
  if (Array.isArray(union)) {
    const fits = union.some((option) => {
      const found = [];
      check(option, value, root, path, found);
      return found.length === 0;
    });
    if (!fits) fail("does not match any of the allowed shapes");
    return;
  }
  if (Array.isArray(schema.enum) && !schema.enum.some((option) => same(option, value))) {
    fail(`must be one of ${schema.enum.map((o) => JSON.stringify(o)).join(", ")}`);
    return;
  }
  if ("const" in schema && !same(schema.const, value)) fail(`must be ${JSON.stringify(schema.const)}`);
  if (schema.type && !typeOk(schema.type, value)) {
    fail(`must be ${{ integer: "a whole number", number: "a number", string: "text", boolean: "true or false", object: "an object", array: "a list" }[schema.type] || schema.type}`);
    return;
  }
  if (typeof value === "string") {
    if (schema.minLength !== undefined && [...value].length < schema.minLength) fail(`must be at least ${schema.minLength} characters`);
    if (schema.maxLength !== undefined && [...value].length > schema.maxLength) fail(`must be at most ${schema.maxLength} characters`);
    if (typeof schema.pattern === "string") {
      try {
        if (!new RegExp(schema.pattern, "u").test(value)) fail(`must match ${schema.pattern}`);
      } catch {
        // a pattern JavaScript cannot read: the server checks it
      }
    }
  }
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) fail(`must be at least ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) fail(`must be at most ${schema.maximum}`);
    if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) fail(`must be more than ${schema.exclusiveMinimum}`);
    if (schema.exclusiveMaximum !== undefined && value >= schema.exclusiveMaximum) fail(`must be less than ${schema.exclusiveMaximum}`);
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) fail(`needs at least ${schema.minItems} items`);
    if (schema.maxItems !== undefined && value.length > schema.maxItems) fail(`takes at most ${schema.maxItems} items`);
    if (schema.items) value.forEach((item, i) => check(schema.items, item, root, [...path, i], errors));
  } else if (value && typeof value === "object") {
    const properties = schema.properties || {};
    for (const key of schema.required || []) {
      if (!(key in value)) errors.push({ path: [...path, key], message: "is required" });
    }
    for (const [key, item] of Object.entries(value)) {
      if (key in properties) check(properties[key], item, root, [...path, key], errors);
      else if (schema.additionalProperties === false) errors.push({ path: [...path, key], message: "is not an argument of this tool" });
      else if (schema.additionalProperties && typeof schema.additionalProperties === "object") check(schema.additionalProperties, item, root, [...path, key], errors);
    }
  }
}

export function sorted(value) {
  if (Array.isArray(value)) return value.map(sorted);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sorted(value[k])]));
  }
  return value;
}

const HIDDEN = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]/gu;
export function shown(line) {
  return line.replace(HIDDEN, (c) => `\\u${c.codePointAt(0).toString(16).padStart(4, "0")}`);
}

export function lineDiff(before, after) {
  const a = JSON.stringify(sorted(before), null, 2).split("\n");
  const b = JSON.stringify(sorted(after), null, 2).split("\n");
  if (a.length * b.length > 250000) return [...a.map((l) => ["-", l]), ...b.map((l) => ["+", l])];
  const table = Array.from({ length: a.length + 1 }, () => new Array(b.length + 1).fill(0));
  for (let i = a.length - 1; i >= 0; i -= 1) {
    for (let j = b.length - 1; j >= 0; j -= 1) {
      table[i][j] = a[i] === b[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) {
      out.push([" ", a[i]]);
      i += 1;
      j += 1;
    } else if (table[i + 1][j] >= table[i][j + 1]) {
      out.push(["-", a[i]]);
      i += 1;
    } else {
      out.push(["+", b[j]]);
      j += 1;
    }
  }
  while (i < a.length) out.push(["-", a[i++]]);
  while (j < b.length) out.push(["+", b[j++]]);
  return out;
}


// The review page: decisions shown per call, the edit form read back typed and checked against
// the tool's schema, the diff against the proposal before anything is sent, a/r/e keys, and a
// notice when someone else decides the review meanwhile. The server checks everything again.
import { announce, follow, onKey } from "./common.js";

const form = document.getElementById("answer-form");
const data = JSON.parse(document.getElementById("review-data").textContent);
const submit = document.getElementById("submit");
const confirmBox = document.getElementById("confirm");
const submitLabel = submit.textContent;
const OMIT = Symbol("omit");
let confirmed = false;

// Reading the form ------------------------------------------------------------------------------
function ownedBy(field, element) {
  return element.closest("[data-field]") === field;
}

function childFields(container, field) {
  return [...container.querySelectorAll("[data-field]")].filter(
    (f) => f !== field && (f.parentElement ? f.parentElement.closest("[data-field]") : null) === field,
  );
}

function control(field) {
  return [...field.querySelectorAll("[name^='v:']")].find((c) => ownedBy(field, c)) || null;
}

function stateOf(field) {
  const select = [...field.querySelectorAll("select[data-state]")].find((s) => ownedBy(field, s));
  return select ? select.value : "set";
}

function readField(field, errors) {
  const path = JSON.parse(field.dataset.path);
  const state = stateOf(field);
  if (state === "omit") return OMIT;
  if (state === "null") return null;
  const kind = field.dataset.kind;
  if (kind === "object") {
    const out = {};
    for (const child of childFields(field, field)) {
      const value = readField(child, errors);
      if (value !== OMIT) out[JSON.parse(child.dataset.path).at(-1)] = value;
    }
    return out;
  }
  if (kind === "array") {
    const items = field.querySelector("[data-items]");
    return [...items.children].map((li) => readField(li.querySelector("[data-field]"), errors));
  }
  const input = control(field);
  const raw = input ? input.value : "";
  const fail = (message) => {
    errors.push({ path, message });
    return null;
  };
  if (kind === "string" || kind === "text") return raw;
  if (kind === "boolean") return Boolean(input && input.checked);
  if (kind === "number" || kind === "integer") {
    if (raw.trim() === "") return fail(kind === "number" ? "enter a number" : "enter a whole number");
    const number = Number(raw);
    if (!Number.isFinite(number)) return fail(`'${raw}' is not a number`);
    if (kind === "integer" && !Number.isInteger(number)) return fail(`'${raw}' is not a whole number`);
    return number;
  }
  if (kind === "enum") {
    if (raw === "") return fail("choose one of the listed values");
    return JSON.parse(raw);
  }
  try {
    return JSON.parse(raw.trim() || "null");
  } catch (error) {
    return fail(`not JSON (${error.message})`);
  }
}

function editedArgs(index, errors) {
  const box = form.querySelector(`[data-edit="${index}"] .edit-fields`);
  const top = [...box.querySelectorAll("[data-field]")].filter((f) => !f.parentElement.closest("[data-field]"));
  if (top.length === 1 && JSON.parse(top[0].dataset.path).length === 0) return readField(top[0], errors);
  const out = {};
  for (const field of top) {
    const value = readField(field, errors);
    if (value !== OMIT) out[JSON.parse(field.dataset.path).at(-1)] = value;
  }
  return out;
}

// Checking against the schema -------------------------------------------------------------------
function resolve(schema, root) {
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

function check(schemaIn, value, root, path, errors) {
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

// Showing errors and the diff -------------------------------------------------------------------
function fieldAt(index, path) {
  const wanted = JSON.stringify(path);
  return [...form.querySelectorAll(`[data-edit="${index}"] [data-field]`)].find((f) => JSON.stringify(JSON.parse(f.dataset.path)) === wanted) || null;
}

function clearErrors(index) {
  for (const field of form.querySelectorAll(`[data-edit="${index}"] [data-field]`)) {
    field.classList.remove("invalid");
    const message = [...field.querySelectorAll(".field-error")].find((p) => ownedBy(field, p));
    if (message) {
      message.hidden = true;
      message.textContent = "";
    }
    const input = control(field);
    if (input) input.removeAttribute("aria-invalid");
  }
}

function showErrors(index, errors) {
  clearErrors(index);
  let first = null;
  const unplaced = [];
  for (const error of errors) {
    let path = error.path;
    let field = fieldAt(index, path);
    while (!field && path.length) {
      path = path.slice(0, -1);
      field = fieldAt(index, path);
    }
    if (!field) {
      unplaced.push(`${error.path.join(".") || "arguments"} ${error.message}`);
      continue;
    }
    const name = error.path.slice(path.length).join(".");
    field.classList.add("invalid");
    const message = [...field.querySelectorAll(".field-error")].find((p) => ownedBy(field, p));
    if (message) {
      message.hidden = false;
      message.textContent = [message.textContent, `${name ? `${name} ` : ""}${error.message}`].filter(Boolean).join("; ");
    }
    const input = control(field);
    if (input) input.setAttribute("aria-invalid", "true");
    first = first || input || field;
  }
  return { first, unplaced };
}

function sorted(value) {
  if (Array.isArray(value)) return value.map(sorted);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sorted(value[k])]));
  }
  return value;
}

const HIDDEN = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]/gu;
function shown(line) {
  return line.replace(HIDDEN, (c) => `\\u${c.codePointAt(0).toString(16).padStart(4, "0")}`);
}

function lineDiff(before, after) {
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

function showDiff(index, args) {
  const box = form.querySelector(`[data-diff="${index}"]`);
  const pre = box.querySelector("pre");
  pre.replaceChildren();
  const lines = lineDiff(data.calls[index].args, args);
  if (lines.every(([op]) => op === " ")) {
    const span = document.createElement("span");
    span.className = "same";
    span.textContent = "No changes: these are the arguments as proposed.";
    pre.append(span);
  }
  for (const [op, line] of lines) {
    if (lines.every(([o]) => o === " ")) break;
    const span = document.createElement("span");
    span.className = op === "+" ? "add" : op === "-" ? "del" : "same";
    span.textContent = `${op} ${shown(line)}`;
    pre.append(span);
  }
  box.hidden = false;
}

/** Read, check and diff the edit form of call `index`; the first bad field, if any. */
function refreshEdit(index) {
  const errors = [];
  const args = editedArgs(index, errors);
  const call = data.calls[index];
  if (call.schema && errors.length === 0) check(call.schema, args, call.schema, [], errors);
  const { first, unplaced } = showErrors(index, errors);
  if (!errors.length) showDiff(index, args);
  return { ok: errors.length === 0, first, unplaced };
}

// Showing what each decision needs --------------------------------------------------------------
function decisionOf(section) {
  const picked = section.querySelector("input[type='radio']:checked");
  return picked ? picked.value : null;
}

function applyDecision(section) {
  const decision = decisionOf(section);
  const edit = section.querySelector("[data-edit]");
  const message = section.querySelector("[data-message]");
  if (edit) edit.hidden = decision !== "edit";
  if (message) message.hidden = decision !== "reject" && decision !== "respond";
  if (edit && decision === "edit") refreshEdit(Number(section.dataset.call));
}

function applyStates() {
  // A field whose own choice is "leave it out" or "send null" switches off everything inside it.
  const controls = form.querySelectorAll("[data-field] input, [data-field] select, [data-field] textarea, [data-field] button");
  for (const element of controls) {
    let off = false;
    for (let f = element.closest("[data-field]"); f && !off; f = f.parentElement ? f.parentElement.closest("[data-field]") : null) {
      const own = [...f.querySelectorAll("select[data-state]")].find((s) => ownedBy(f, s));
      off = Boolean(own && own !== element && own.value !== "set");
    }
    element.disabled = off;
  }
}

function unconfirm() {
  if (!confirmed) return;
  confirmed = false;
  confirmBox.hidden = true;
  submit.textContent = submitLabel;
}

const sections = [...form.querySelectorAll("section.call[data-call]")];
for (const section of sections) applyDecision(section);
applyStates();

form.addEventListener("change", (event) => {
  unconfirm();
  const section = event.target.closest("section.call[data-call]");
  if (event.target.matches("select[data-state]")) applyStates();
  if (section) applyDecision(section);
});
form.addEventListener("input", (event) => {
  unconfirm();
  const edit = event.target.closest("[data-edit]");
  if (edit) refreshEdit(Number(edit.dataset.edit));
});

form.addEventListener("click", (event) => {
  const target = event.target instanceof Element ? event.target : null;
  if (!target) return;
  const add = target.closest("[data-add]");
  const remove = target.closest("[data-remove]");
  if (add) {
    const group = add.closest("[data-field]");
    const items = group.querySelector("[data-items]");
    const next = Number(items.dataset.next);
    items.dataset.next = String(next + 1);
    const li = group.querySelector("template[data-template]").content.firstElementChild.cloneNode(true);
    const path = [...JSON.parse(group.dataset.path), next];
    const field = li.querySelector("[data-field]");
    field.dataset.path = JSON.stringify(path);
    const input = control(field) || field.querySelector("input, select, textarea");
    const id = `${group.dataset.call}-new-${next}-${Math.random().toString(36).slice(2, 8)}`;
    if (input) {
      input.name = `v:${group.dataset.call}:${JSON.stringify(path)}`;
      input.id = `f${id}`;
      input.setAttribute("aria-describedby", `f${id}-error`);
    }
    const label = field.querySelector("label");
    if (label) label.htmlFor = `f${id}`;
    const error = field.querySelector(".field-error");
    if (error) error.id = `f${id}-error`;
    items.append(li);
    if (input) input.focus();
  } else if (remove) {
    const li = remove.closest("[data-item]");
    const items = li.parentElement;
    li.remove();
    const first = items.querySelector("input, select, textarea");
    (first || items.closest("[data-field]").querySelector("[data-add]")).focus();
  } else {
    return;
  }
  unconfirm();
  const edit = target.closest("[data-edit]");
  if (edit) refreshEdit(Number(edit.dataset.edit));
});

// Submitting: check everything, show the diff of any edit once, then send -------------------------
function problem(text, focus) {
  let box = document.getElementById("client-error");
  if (!box) {
    box = document.createElement("div");
    box.id = "client-error";
    box.className = "error-box";
    box.setAttribute("role", "alert");
    form.prepend(box);
  }
  box.textContent = text;
  box.hidden = false;
  if (focus) focus.focus();
}

form.addEventListener("submit", (event) => {
  const old = document.getElementById("client-error");
  if (old) old.hidden = true;
  let edits = 0;
  for (const section of sections) {
    const index = Number(section.dataset.call);
    const name = data.calls[index].name;
    const decision = decisionOf(section);
    if (!decision) {
      event.preventDefault();
      problem(`Choose a decision for ${sections.length > 1 ? `call ${index + 1} (${name})` : name}.`, section.querySelector("input[type='radio']"));
      return;
    }
    const message = section.querySelector("[data-message] textarea");
    const messageError = section.querySelector("[data-message] .field-error");
    if (messageError) messageError.hidden = true;
    if (decision === "respond" && message && !message.value.trim()) {
      event.preventDefault();
      messageError.textContent = "A response needs a message: it takes the place of the tool's result.";
      messageError.hidden = false;
      message.setAttribute("aria-invalid", "true");
      message.focus();
      return;
    }
    if (decision === "edit") {
      edits += 1;
      const { ok, first, unplaced } = refreshEdit(index);
      if (!ok) {
        event.preventDefault();
        problem(`The edited arguments of ${name} do not fit its schema${unplaced.length ? `: ${unplaced.join("; ")}` : ""}; see the marked fields.`, first);
        return;
      }
    }
  }
  if (edits && !confirmed) {
    event.preventDefault();
    confirmed = true;
    confirmBox.hidden = false;
    submit.textContent = "Confirm and submit";
    const diff = form.querySelector("[data-diff]:not([hidden]) pre");
    if (diff) diff.focus();
    announce("Check your changes, then submit again to record them.");
  }
});

// Keys: a approve all, r reject all, e edit -------------------------------------------------------
function pickAll(decision) {
  let any = false;
  for (const section of sections) {
    const radio = section.querySelector(`input[type='radio'][value='${decision}']`);
    if (radio) {
      radio.checked = true;
      any = true;
      applyDecision(section);
    }
  }
  unconfirm();
  return any;
}
onKey("a", (event) => {
  if (pickAll("approve")) {
    event.preventDefault();
    submit.focus();
    announce("Approve chosen for every call. Press Enter to submit.");
  }
});
onKey("r", (event) => {
  if (pickAll("reject")) {
    event.preventDefault();
    const message = form.querySelector("[data-message]:not([hidden]) textarea");
    (message || submit).focus();
  }
});
onKey("e", (event) => {
  const section = sections.find((s) => s.querySelector("input[type='radio'][value='edit']"));
  if (!section) return;
  event.preventDefault();
  section.querySelector("input[type='radio'][value='edit']").checked = true;
  applyDecision(section);
  unconfirm();
  const first = section.querySelector("[data-edit] input:not([disabled]), [data-edit] select:not([data-state]), [data-edit] textarea");
  if (first) first.focus();
});

// Someone else deciding this review meanwhile ------------------------------------------------------
const live = document.getElementById("review-live");
const notice = document.getElementById("live-notice");
follow(live.dataset.after, {
  "review.decided": (event) => {
    if (event.interrupt_id !== live.dataset.interrupt || event.thread_id !== live.dataset.thread) return;
    const who = event.reviewer && event.reviewer.id ? event.reviewer.id : "someone";
    notice.textContent = `${who} just decided this review${event.channel ? ` (through ${event.channel})` : ""}. An answer from you now would not be recorded. `;
    const link = document.createElement("a");
    link.href = `${form.getAttribute("action")}/decided`;
    link.textContent = "See what was decided";
    notice.append(link);
    notice.hidden = false;
  },
});
const serverError = document.getElementById("form-error");
if (serverError) serverError.focus();
document.body.dataset.ready = "true"; // the page's script has run (tests wait for it)

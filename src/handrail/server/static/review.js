// The review page: decisions shown per call, the edit form read back typed and checked against
// the tool's schema, the diff against the proposal before anything is sent, a/r/e keys, and a
// notice when someone else decides the review meanwhile. The server checks everything again.
import { announce, follow, onKey } from "./common.js";
import { check, lineDiff, shown } from "./schema.js";

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

// The proposal's value at `path` (a long one folded, as the page shows it): what "keep" sends.
function proposedAt(field, path) {
  let value = data.calls[Number(field.dataset.call)].args;
  for (const part of path) value = value == null ? undefined : value[part];
  return value;
}

function readField(field, errors) {
  const path = JSON.parse(field.dataset.path);
  const state = stateOf(field);
  if (state === "keep") {
    errors.kept = [...(errors.kept || []), JSON.stringify(path)];
    return proposedAt(field, path);
  }
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
  if (call.schema && errors.length === 0) {
    // a kept long value is the proposal's, folded here: the server checks the whole of it
    const kept = errors.kept || [];
    const found = [];
    check(call.schema, args, call.schema, [], found);
    errors.push(...found.filter((e) => !kept.some((k) => JSON.stringify(e.path).startsWith(k.slice(0, -1)))));
  }
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
  const grant = section.querySelector("[data-grant]");
  if (grant) {
    // "And allow later calls for..." goes with Approve (rule 16); its options with the box
    grant.hidden = decision !== "approve";
    grant.querySelector("[data-grant-options]").disabled = !grant.querySelector("input[name$=':on']").checked;
  }
  if (edit) edit.hidden = decision !== "edit";
  if (message) message.hidden = decision !== "reject" && decision !== "respond";
  if (edit) applyStates(); // the edit fields are sent only with an edit
  if (edit && decision === "edit") refreshEdit(Number(section.dataset.call));
}

function applyStates() {
  // A field whose own choice is "leave it out" or "send null" switches off everything inside it.
  const controls = form.querySelectorAll("[data-field] input, [data-field] select, [data-field] textarea, [data-field] button");
  for (const element of controls) {
    const section = element.closest("section.call[data-call]");
    let off = Boolean(section && decisionOf(section) !== "edit");
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
  if (event.target.matches("[data-grant] input.uses")) {
    // typing a number of calls chooses "a number of calls"
    const calls = event.target.closest("[data-grant]").querySelector("input[value='calls']");
    if (calls) calls.checked = true;
  }
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
    const box = section.querySelector("[data-grant]");
    if (decision === "approve" && box && box.querySelector("input[name$=':on']").checked) {
      const span = box.querySelector("input[name$=':for']:checked");
      const uses = box.querySelector("input.uses");
      if (span && span.value === "calls" && !/^[1-9][0-9]{0,6}$/.test(uses.value.trim())) {
        event.preventDefault();
        problem(`Enter how many calls of ${name} the grant covers.`, uses);
        return;
      }
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
const approved = document.getElementById("live-approved");
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
  "review.expired": (event) => {
    if (event.interrupt_id !== live.dataset.interrupt || event.thread_id !== live.dataset.thread) return;
    notice.textContent = "This review just expired unanswered: its policy decided it. An answer from you now would not be recorded. ";
    const link = document.createElement("a");
    link.href = `${form.getAttribute("action")}/decided`;
    link.textContent = "See what became of it";
    notice.append(link);
    notice.hidden = false;
  },
  // One approval of a review that needs several (it stays open): say so; the count is the server's.
  "review.approved": (event) => {
    if (event.interrupt_id !== live.dataset.interrupt || event.thread_id !== live.dataset.thread) return;
    const who = event.reviewer && event.reviewer.id ? event.reviewer.id : "someone";
    approved.textContent = `${who} just approved this review${event.channel ? ` (through ${event.channel})` : ""}. `;
    const link = document.createElement("a");
    link.href = form.getAttribute("action");
    link.textContent = "Reload to see the approvals as they stand";
    approved.append(link);
    approved.hidden = false;
  },
});
const serverError = document.getElementById("form-error");
if (serverError) serverError.focus();
document.body.dataset.ready = "true"; // the page's script has run (tests wait for it)

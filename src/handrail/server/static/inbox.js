// The inbox page: live rows (server-sent events), the title's count, bulk ticking, j/k/x keys.
import { announce, follow, onKey } from "./common.js";

const table = document.getElementById("inbox");
const rows = document.getElementById("rows");
const empty = document.getElementById("empty");
const moreNew = document.getElementById("more-new");
const bulkButtons = [...document.querySelectorAll("[data-bulk]")];
const bulkStatus = document.getElementById("bulk-status");
const selectAll = document.getElementById("select-all");

function allRows() {
  return [...rows.querySelectorAll("tr.row")];
}

function updateCount() {
  const count = allRows().length;
  const more = table.dataset.more === "true" ? "+" : "";
  document.title = `(${count}${more}) Inbox · handrail`;
  empty.hidden = count > 0;
}

function ticked() {
  return [...rows.querySelectorAll("input[name='review']:checked")];
}

function updateBulk() {
  const boxes = ticked();
  const tools = [...new Set(boxes.map((b) => b.dataset.tool))];
  let ok = false;
  if (boxes.length === 0) {
    bulkStatus.textContent = "Tick reviews of one tool to approve or reject them together.";
  } else if (tools.length > 1) {
    bulkStatus.textContent = `Bulk answers take reviews of one tool; you ticked ${tools.join(" and ")}.`;
  } else {
    ok = true;
    const n = boxes.length;
    bulkStatus.textContent = `${n} review${n === 1 ? "" : "s"} of ${tools[0]} ticked.`;
  }
  for (const button of bulkButtons) button.disabled = !ok;
}

rows.addEventListener("change", (event) => {
  if (event.target instanceof HTMLInputElement && event.target.name === "review") updateBulk();
});

selectAll.addEventListener("change", () => {
  const boxes = [...rows.querySelectorAll("input[name='review']")];
  if (!selectAll.checked) {
    for (const box of boxes) box.checked = false;
  } else {
    const first = ticked()[0] || boxes[0];
    const tool = first ? first.dataset.tool : null;
    for (const box of boxes) box.checked = box.dataset.tool === tool;
  }
  updateBulk();
});

// j / k move the selection, Enter opens it (it is a link), x ticks it.
let current = -1;
function select(index) {
  const list = allRows();
  if (!list.length) return;
  current = Math.max(0, Math.min(list.length - 1, index));
  for (const row of list) row.classList.remove("current");
  const row = list[current];
  row.classList.add("current");
  const link = row.querySelector("a.open");
  if (link) link.focus();
}
function focusedIndex() {
  const row = document.activeElement instanceof Element ? document.activeElement.closest("tr.row") : null;
  return row ? allRows().indexOf(row) : current;
}
onKey("j", (event) => {
  event.preventDefault();
  select(focusedIndex() + 1);
});
onKey("k", (event) => {
  event.preventDefault();
  select(Math.max(0, focusedIndex() - 1));
});
onKey("x", (event) => {
  const list = allRows();
  const index = focusedIndex();
  const box = index >= 0 && list[index] ? list[index].querySelector("input[name='review']") : null;
  if (box) {
    event.preventDefault();
    box.checked = !box.checked;
    updateBulk();
  }
});

function findRow(interruptId) {
  return allRows().find((row) => row.dataset.interrupt === interruptId) || null;
}

/** The row of one review as the server makes it now (null: not for this reviewer or filter). */
async function fetchRow(data) {
  const query = new URLSearchParams(table.dataset.query);
  query.set("thread", data.thread_id);
  query.set("interrupt", data.interrupt_id);
  const reply = await fetch(`/inbox/rows?${query}`, { credentials: "same-origin" });
  if (reply.status !== 200) return null;
  // The row is made by the server's template, with every value escaped there.
  const template = document.createElement("template");
  template.innerHTML = (await reply.text()).trim();
  return template.content.querySelector("tr.row");
}

async function addRow(data) {
  if (findRow(data.interrupt_id)) return;
  const newestFirst = table.dataset.order === "newest";
  const fits = newestFirst ? table.dataset.first === "true" : table.dataset.last === "true";
  if (!fits) {
    moreNew.hidden = false;
    return;
  }
  const row = await fetchRow(data);
  if (!row || findRow(data.interrupt_id)) return;
  row.classList.add("fresh");
  if (newestFirst) rows.prepend(row);
  else rows.append(row);
  updateCount();
  announce(`New review: ${(data.tools || []).join(", ") || "an answer"} on thread ${data.thread_id}.`);
}

function removeRow(data, said) {
  const row = findRow(data.interrupt_id);
  if (!row) return;
  const index = allRows().indexOf(row);
  const hadFocus = row.contains(document.activeElement);
  row.remove();
  updateCount();
  updateBulk();
  const who = data.reviewer && data.reviewer.id ? data.reviewer.id : "someone";
  announce(said || `A review on thread ${data.thread_id} was answered by ${who}.`);
  if (hadFocus) select(index);
}

// One approval of a review that needs several: the row stays, with its count as it is now.
async function updateRow(data) {
  const row = findRow(data.interrupt_id);
  if (!row) return;
  const fresh = await fetchRow(data);
  const now = findRow(data.interrupt_id);
  if (!fresh || !now) return;
  const box = now.querySelector("input[name='review']");
  const freshBox = fresh.querySelector("input[name='review']");
  if (box && freshBox) freshBox.checked = box.checked;
  if (now.classList.contains("current")) fresh.classList.add("current");
  now.replaceWith(fresh);
  const who = data.reviewer && data.reviewer.id ? data.reviewer.id : "someone";
  announce(`${who} approved a review on thread ${data.thread_id}; it waits for more approvals.`);
}

follow(table.dataset.after, {
  "review.requested": addRow,
  "review.decided": (data) => removeRow(data),
  "review.approved": updateRow,
  "review.expired": (data) => removeRow(data, `A review on thread ${data.thread_id} expired unanswered.`),
});
updateCount();
updateBulk();
document.body.dataset.ready = "true"; // the page's script has run (tests wait for it)
